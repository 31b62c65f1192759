import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';

/**
 * The near cache's `'client'` tracking mode on real Redis: `OPTIN` tracking on the
 * client passed in, redirected to the cache's own connection. A first execution costs
 * no invalidation; the modes it falls back from; the client's connection lost, killed
 * under load, or its tracking switched off by the application, none of which may let a
 * stale record be answered. Nothing here waits a fixed time: it polls with a deadline.
 */
const prefix = () => `test:near-client:${randomUUID()}:`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const stats = (store: RedisIdempotencyStore) => store.nearCacheStats()!;
const connect = (options: Record<string, unknown> = {}) =>
  new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions(), ...options });

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await sleep(2);
  }
}

async function nearStore(client: Redis): Promise<RedisIdempotencyStore> {
  const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
  await store.verify();
  await until(() => stats(store).enabled, 'the near cache to switch on');
  return store;
}

let tokens = 0;
const token = () => `t${++tokens}`;

async function firstExecution(store: RedisIdempotencyStore, key: string, result: string): Promise<void> {
  const lease = token();
  expect((await store.claim(key, { token: lease, leaseTtl: 30_000 })).claimed).toBe(true);
  expect(await store.complete(key, lease, { result, ttl: 60_000 })).toBe(true);
}

/** Replays `key` until one is answered from memory; every replay must carry `result`. */
async function replayUntilCached(store: RedisIdempotencyStore, key: string, result: string): Promise<void> {
  await until(async () => {
    const hits = stats(store).hits;
    const replay = await store.claim(key, { token: token(), leaseTtl: 30_000 });
    expect(replay).toMatchObject({ claimed: false, record: { status: 'completed', result } });
    return stats(store).hits > hits;
  }, `${key} to be answered from the near cache`);
}

describe("near cache in 'client' mode", () => {
  let client: Redis;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    client = connect();
    admin = connect();
    store = await nearStore(client);
  });
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
  });

  it("tracks on the client passed in (OPTIN, redirected to the cache's connection)", async () => {
    expect(stats(store).tracking).toBe('client');
    const info = (await client.call('CLIENT', 'TRACKINGINFO')) as unknown[];
    const fields = new Map<string, unknown>();
    for (let i = 0; i + 1 < info.length; i += 2) fields.set(String(info[i]), info[i + 1]);
    expect(fields.get('flags')).toEqual(expect.arrayContaining(['on', 'optin']));
    expect(Number(fields.get('redirect'))).toBe(
      (store as unknown as { nearCache: { trackingClientId?: number } }).nearCache.trackingClientId,
    );
  });

  it("costs a first execution no invalidation, where 'broadcast' mode hears two", async () => {
    // A second near cache on the same client cannot redirect its tracking: it broadcasts.
    const broadcast = await nearStore(client);
    try {
      expect(stats(broadcast).tracking).toBe('broadcast');
      const ownBefore = stats(store).invalidations;
      const broadcastBefore = stats(broadcast).invalidations;
      for (let i = 0; i < 50; i++) {
        await firstExecution(store, `first-${i}`, `r${i}`);
        await firstExecution(broadcast, `first-${i}`, `r${i}`);
      }
      // Every invalidation Redis sent before these calls has been handled after them.
      await Promise.all([store.syncNearCache(), broadcast.syncNearCache()]);
      expect(stats(store).invalidations - ownBefore).toBe(0);
      expect(stats(broadcast).invalidations - broadcastBefore).toBeGreaterThanOrEqual(100);
    } finally {
      await broadcast.close();
    }
  });

  it('caches a key from its second replay on, and hears a write by another connection', async () => {
    const key = 'k-second-replay';
    await firstExecution(store, key, 'v1');
    const hits = stats(store).hits;
    // The first replay finds it completed (untracked), the second reads it tracked and keeps it.
    for (let i = 0; i < 2; i++) {
      expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ record: { result: 'v1' } });
    }
    expect(stats(store).entries).toBeGreaterThanOrEqual(1);
    await replayUntilCached(store, key, 'v1');
    expect(stats(store).hits).toBe(hits + 1);
    const seen = stats(store).invalidations;
    expect(await admin.del(`${store.prefix}{${key}}`)).toBe(1);
    await until(() => stats(store).invalidations > seen, 'the invalidation of the delete');
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it("falls back to 'broadcast' on a client with tracking of its own, and leaves that tracking alone", async () => {
    const own = connect({ lazyConnect: true });
    try {
      await own.connect();
      await own.call('CLIENT', 'TRACKING', 'ON');
      const other = await nearStore(own);
      try {
        expect(stats(other).tracking).toBe('broadcast');
        const info = (await own.call('CLIENT', 'TRACKINGINFO')) as unknown[];
        expect(info[1]).toEqual(['on']);
      } finally {
        await other.close();
      }
    } finally {
      own.disconnect();
    }
  });
});

describe("near cache in 'client' mode: the client's connection", () => {
  let client: Redis;
  let admin: Redis;
  let store: RedisIdempotencyStore;
  const clientId = async () => Number(await client.call('CLIENT', 'ID'));

  beforeEach(async () => {
    // 200 ms between reconnections: long enough to forget a key while the client is down.
    client = connect({ retryStrategy: () => 200 });
    admin = connect();
    store = await nearStore(client);
  });
  afterEach(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
  });

  it('killed: switches off and empties at once, re-arms on the new connection, and respects a delete made meanwhile', async () => {
    const key = 'k-client-killed';
    await firstExecution(store, key, 'before');
    await replayUntilCached(store, key, 'before');
    await firstExecution(store, 'k-kept', 'kept');
    await replayUntilCached(store, 'k-kept', 'kept');
    await admin.call('CLIENT', 'KILL', 'ID', String(await clientId()));
    await until(() => client.status !== 'ready', 'the client to see its connection closed');
    expect(stats(store).enabled).toBe(false);
    expect(stats(store).entries).toBe(0);
    await until(() => client.status === 'ready', 'the client to reconnect');
    // A delete nobody can hear of: the killed connection's tracking went with it. Asked
    // at once (no heartbeat has run), the cache must not answer the record.
    expect(await admin.del(`${store.prefix}{${key}}`)).toBe(1);
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
    await until(() => stats(store).enabled, 'the near cache to switch on again');
    // Tracking is on the new connection: a key cached now is invalidated by a delete.
    await replayUntilCached(store, 'k-kept', 'kept');
    const seen = stats(store).invalidations;
    expect(await admin.del(`${store.prefix}{k-kept}`)).toBe(1);
    await until(() => stats(store).invalidations > seen, 'the invalidation of the delete');
    expect((await store.claim('k-kept', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('its tracking switched off by the application: noticed within a heartbeat plus the timeout, and armed again', async () => {
    const key = 'k-tracking-off';
    await firstExecution(store, key, 'before');
    await replayUntilCached(store, key, 'before');
    await client.call('CLIENT', 'TRACKING', 'OFF');
    await until(() => !stats(store).enabled || stats(store).entries === 0, 'the near cache to notice', 10_000);
    await until(() => stats(store).enabled, 'the near cache to switch on again');
    expect(stats(store).entries).toBe(0);
    await replayUntilCached(store, key, 'before');
    const seen = stats(store).invalidations;
    expect(await admin.del(`${store.prefix}{${key}}`)).toBe(1);
    await until(() => stats(store).invalidations > seen, 'the invalidation of the delete');
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  }, 20_000);

  it('never answers a stale record while both its connections are killed again and again under load', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `k-load-${i}`);
    // The writer: a store of its own (no near cache) that forgets a key and completes it
    // again with the next version, then waits until the cache reflects that (sync).
    const writer = new RedisIdempotencyStore(admin, { prefix: store.prefix });
    const version = new Map<string, number>();
    for (const key of keys) {
      version.set(key, 0);
      await firstExecution(writer, key, `${key}@0`);
    }
    const deadline = Date.now() + 5_000;
    let stale = 0;
    let checked = 0;
    let kills = 0;
    let switchedOff = 0;
    const hitsBefore = stats(store).hits;
    const reader = async () => {
      while (Date.now() < deadline) {
        // A hit, or a claim refused while the client reconnects, settles without I/O: let the rest run.
        await new Promise(setImmediate);
        const key = keys[Math.floor(Math.random() * keys.length)]!;
        // What the writer had finished (and synced) before this claim was sent.
        const floor = version.get(key)!;
        try {
          const claim = await store.claim(key, { token: token(), leaseTtl: 30_000 });
          if (claim.claimed) {
            // Between the writer's delete and its completion: hand the key back.
            await store.release(key, claim.record.leaseToken!);
            continue;
          }
          if (claim.record.status !== 'completed') continue;
          checked++;
          if (Number(claim.record.result!.split('@')[1]) < floor) stale++;
        } catch {
          // The client's connection was being killed: refused at once until it is back.
          await sleep(1);
        }
      }
    };
    const write = async () => {
      while (Date.now() < deadline) {
        const key = keys[Math.floor(Math.random() * keys.length)]!;
        const next = version.get(key)! + 1;
        await writer.delete(key);
        const lease = token();
        const claim = await writer.claim(key, { token: lease, leaseTtl: 30_000 });
        if (!claim.claimed) continue; // a reader's claim holds it for a moment
        await writer.complete(key, lease, { result: `${key}@${next}`, ttl: 60_000 });
        await store.syncNearCache();
        version.set(key, next);
      }
    };
    // Kills, in turn, the client's connection and the cache's own, each time the cache answers again.
    const kill = async () => {
      while (Date.now() < deadline) {
        while (!stats(store).enabled && Date.now() < deadline) await sleep(5);
        await sleep(100);
        const tracking = (store as unknown as { nearCache: { trackingClientId?: number } }).nearCache.trackingClientId;
        const target = kills % 2 === 0 ? await clientId().catch(() => undefined) : tracking;
        if (target === undefined || Date.now() >= deadline) continue;
        await admin.call('CLIENT', 'KILL', 'ID', String(target)).catch(() => undefined);
        kills++;
        const offBy = Date.now() + 2_000;
        while (stats(store).enabled && Date.now() < offBy) await sleep(1);
        if (!stats(store).enabled) switchedOff++;
      }
    };
    await Promise.all([reader(), reader(), reader(), write(), kill()]);
    await until(() => stats(store).enabled, 'the near cache to switch on after the last kill');
    expect(stale).toBe(0);
    expect(kills).toBeGreaterThanOrEqual(6);
    // Every kill switched the cache off; each came back before the next (the loop waits for it).
    expect(switchedOff).toBe(kills);
    expect(stats(store).hits - hitsBefore).toBeGreaterThan(100);
    // The readers checked real answers, not only refusals (how many were refused depends on
    // how long each reconnection took, so on the machine's load; under load 20 000 answers
    // were checked beside as many refusals).
    expect(checked).toBeGreaterThan(1_000);
  }, 30_000);
});
