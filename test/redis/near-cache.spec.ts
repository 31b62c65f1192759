import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import type { IdempotencyStore } from '../../lib/core/store.js';
import { Test } from '@nestjs/testing';
import { IdempotencyModule } from '../../lib/nest/idempotency.module.js';
import { IdempotencyService } from '../../lib/nest/idempotency.service.js';
import { RedisIdempotencyStore, recommendedRedisOptions, type RedisIdempotencyStoreOptions } from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * The near cache of RedisIdempotencyStore on real Redis: replays answered from memory,
 * and every way a cached record can go stale (a forget or a new result from another
 * process, expiry, a lost tracking connection, an invalidation racing a claim) shown not
 * to be served. Nothing here waits a fixed time: it polls a condition with a deadline.
 */
const prefix = () => `test:near:${randomUUID()}:`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const PEER = join(__dirname, 'fixtures', 'near-cache-peer.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await sleep(2);
  }
}

const stats = (store: RedisIdempotencyStore) => store.nearCacheStats()!;
const trackingClientId = (store: RedisIdempotencyStore) =>
  (store as unknown as { nearCache: { trackingClientId?: number } }).nearCache.trackingClientId;

/** A store with the near cache on, started and proven (enabled). */
async function nearStore(client: Redis | Redis5, options: RedisIdempotencyStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const store = new RedisIdempotencyStore(client as Redis, { prefix: prefix(), nearCache: true, ...options });
  await store.verify();
  await until(() => stats(store).enabled, 'the near cache to switch on');
  return store;
}

let tokens = 0;
const token = () => `t${++tokens}`;

/**
 * Runs `key` to completion with `result`, then replays it until a replay is answered from
 * memory (the first replays may still meet the invalidation of the completion in flight).
 * Every replay must carry `result`.
 */
async function completeAndCache(store: RedisIdempotencyStore, key: string, result: string, ttl = 60_000): Promise<void> {
  const first = token();
  const claim = await store.claim(key, { token: first, leaseTtl: 30_000 });
  expect(claim.claimed).toBe(true);
  expect(await store.complete(key, first, { result, ttl })).toBe(true);
  await replayUntilCached(store, key, result);
}

async function replayUntilCached(store: RedisIdempotencyStore, key: string, result: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const hits = stats(store).hits;
    const replay = await store.claim(key, { token: token(), leaseTtl: 30_000 });
    expect(replay).toMatchObject({ claimed: false, record: { status: 'completed', result } });
    if (stats(store).hits > hits) return;
    if (Date.now() > deadline) throw new Error(`${key} was never answered from the near cache`);
    await sleep(1);
  }
}

describeStoreContract('RedisIdempotencyStore with nearCache (ioredis 6)', async () => {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await client.connect();
  const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
  return {
    store,
    dispose: async () => {
      await store.close();
      client.disconnect();
    },
  };
});

describe.each([
  ['ioredis 6 (RESP3 by default)', () => new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() })],
  ['ioredis 5 (RESP2)', () => new Redis5({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() })],
])('near cache replays, %s', (_name, connect) => {
  let client: Redis | Redis5;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    client = connect();
    store = await nearStore(client);
  });
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
  });

  it('answers a replay from memory: later replays send no command at all', async () => {
    await completeAndCache(store, 'k-replay', 'stored result');
    const sent = [jest.spyOn(client, 'evalsha'), jest.spyOn(client, 'eval')];
    try {
      const before = stats(store).hits;
      for (let i = 0; i < 50; i++) {
        const replay = await store.claim('k-replay', { token: token(), leaseTtl: 30_000 });
        expect(replay).toEqual({ claimed: false, record: expect.objectContaining({ status: 'completed', result: 'stored result' }) });
      }
      for (const command of sent) expect(command).not.toHaveBeenCalled();
      expect(stats(store).hits - before).toBe(50);
    } finally {
      for (const command of sent) command.mockRestore();
    }
    // A record still in progress is never cached: its claims all go to Redis.
    const running = token();
    expect((await store.claim('k-running', { token: running, leaseTtl: 30_000 })).claimed).toBe(true);
    const evalsha = jest.spyOn(client, 'evalsha');
    try {
      for (let i = 0; i < 3; i++)
        expect((await store.claim('k-running', { token: token(), leaseTtl: 30_000 })).record.status).toBe('in_progress');
      expect(evalsha).toHaveBeenCalledTimes(3);
    } finally {
      evalsha.mockRestore();
    }
  });

  it('forget() through this store is respected at once', async () => {
    await completeAndCache(store, 'k-forget', 'r');
    expect(await store.delete('k-forget')).toBe(true);
    expect((await store.claim('k-forget', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });
});

describe("near cache with the client's keyPrefix", () => {
  it('tracks the keys as Redis names them (keyPrefix + prefix), so a delete by another connection is heard', async () => {
    const keyPrefix = `kp:${randomUUID()}:`;
    const client = new Redis({ host: '127.0.0.1', port: 6379, keyPrefix, lazyConnect: true, ...recommendedRedisOptions() });
    const admin = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
    await Promise.all([client.connect(), admin.connect()]);
    const store = await nearStore(client);
    try {
      await completeAndCache(store, 'k', 'prefixed');
      const seen = stats(store).invalidations;
      expect(await admin.del(`${keyPrefix}${store.prefix}{k}`)).toBe(1);
      await until(() => stats(store).invalidations > seen, 'the invalidation of the delete');
      expect(stats(store).entries).toBe(0);
      expect((await store.claim('k', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
    } finally {
      await store.close();
      client.disconnect();
      admin.disconnect();
    }
  });
});

describe('near cache across processes', () => {
  let client: Redis;
  let store: RedisIdempotencyStore;
  let peer: ChildProcess;
  let nextId = 0;
  const replies = new Map<number, (reply: { ok: boolean; value?: unknown; error?: string }) => void>();

  function ask(op: 'forget' | 'recomplete' | 'close', key: string, result?: string): Promise<unknown> {
    const id = ++nextId;
    return new Promise((resolve, reject) => {
      replies.set(id, (reply) => (reply.ok ? resolve(reply.value) : reject(new Error(reply.error))));
      peer.send({ id, op, key, result });
    });
  }

  beforeAll(async () => {
    client = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() });
    store = await nearStore(client);
    peer = fork(PEER, [], {
      execArgv: ['--require', TS_REQUIRE],
      env: { ...process.env, PREFIX: store.prefix },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    await new Promise<void>((resolve, reject) => {
      peer.on('message', (message: { ready?: boolean; id?: number }) => {
        if (message.ready) resolve();
        else replies.get(message.id!)?.(message as never);
      });
      peer.once('exit', (code) => reject(new Error(`peer exited with ${code}`)));
    });
  }, 30_000);

  afterAll(async () => {
    if (peer && peer.connected) await ask('close', '').catch(() => undefined);
    if (peer && peer.exitCode === null) peer.kill('SIGKILL');
    await store?.close();
    client?.disconnect();
  });

  it('never replays a record another process forgot (100 rounds)', async () => {
    let stale = 0;
    const key = 'k-cross-forget';
    for (let round = 0; round < 100; round++) {
      await completeAndCache(store, key, `round ${round}`);
      expect(await ask('forget', key)).toBe(true);
      const next = await store.claim(key, { token: `after-${round}`, leaseTtl: 30_000 });
      if (!next.claimed) stale++;
      else await store.release(key, `after-${round}`);
    }
    expect(stale).toBe(0);
    expect(stats(store).hits).toBeGreaterThanOrEqual(100);
  }, 60_000);

  it('never replays a record forgotten while this process was busy: the claim and the invalidation ready at once', async () => {
    const key = 'k-busy-forget';
    let stale = 0;
    for (let round = 0; round < 20; round++) {
      await completeAndCache(store, key, `round ${round}`);
      // Another connection deletes the record as forget() does (the PING after the delete:
      // the invalidation has left Redis when it is answered) while this process's event
      // loop is blocked, so the invalidation waits on the cache's socket; then a claim
      // comes in before that socket is read, as a request handled first would.
      const forgot = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', '6379'], {
        input: `DEL ${store.redisKey(key)}\nPING\n`,
        encoding: 'utf8',
      });
      expect(forgot.stdout.split('\n').slice(0, 2)).toEqual(['1', 'PONG']);
      const next = await store.claim(key, { token: `busy-${round}`, leaseTtl: 30_000 });
      if (!next.claimed) {
        stale++;
        await store.delete(key);
      } else await store.release(key, `busy-${round}`);
    }
    expect(stale).toBe(0);
  }, 60_000);

  it('never replays the old result once another process forgot and re-completed the key (100 rounds)', async () => {
    let stale = 0;
    const key = 'k-cross-recomplete';
    for (let round = 0; round < 100; round++) {
      await completeAndCache(store, key, `ours ${round}`);
      expect(await ask('recomplete', key, `theirs ${round}`)).toBe(true);
      const next = await store.claim(key, { token: token(), leaseTtl: 30_000 });
      if (next.claimed || next.record.status !== 'completed' || next.record.result !== `theirs ${round}`) stale++;
      await store.delete(key);
    }
    expect(stale).toBe(0);
  }, 60_000);
});

describe('near cache and expiry', () => {
  // A Redis of this test's own with active expiry off: an expired key is then removed
  // (and its invalidation sent) only when touched, so only the cache's own deadline
  // (the record's expiresAt on the Redis clock) can stop it being served.
  let server: RedisServerHandle;
  let client: Redis;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    server = await startRedisServer({ args: ['--enable-debug-command', 'local'] });
    client = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, ...recommendedRedisOptions() });
    admin = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, ...recommendedRedisOptions() });
    await Promise.all([client.connect(), admin.connect()]);
    await admin.call('DEBUG', 'SET-ACTIVE-EXPIRE', '0');
    store = await nearStore(client);
  }, 30_000);
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
    await server?.stop();
  });

  it('empties itself on FLUSHDB (an invalidation without a key) and keeps answering afterwards', async () => {
    await completeAndCache(store, 'k-flushed', 'flushed');
    const seen = stats(store).invalidations;
    await admin.flushdb();
    await until(() => stats(store).invalidations > seen, 'the invalidation of the flush');
    expect(stats(store)).toMatchObject({ enabled: true, entries: 0 });
    expect((await store.claim('k-flushed', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('stops answering a record from memory once its retention has passed on the Redis clock', async () => {
    const key = 'k-short';
    await completeAndCache(store, key, 'short-lived', 1_500);
    const expiresAt = ((await store.claim(key, { token: token(), leaseTtl: 30_000 })).record as { expiresAt: number }).expiresAt;
    let servedAfterExpiry = 0;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const [seconds, micros] = (await admin.time()) as unknown as [string, string];
      const redisNow = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
      const hits = stats(store).hits;
      const claim = await store.claim(key, { token: token(), leaseTtl: 30_000 });
      if (claim.claimed) break;
      if (redisNow >= expiresAt && stats(store).hits > hits) servedAfterExpiry++;
      if (Date.now() > deadline) throw new Error('the expired record was still replayed 10 s later');
      await sleep(5);
    }
    expect(servedAfterExpiry).toBe(0);
  });
});

describe('near cache and its tracking connection', () => {
  let client: Redis;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    // The dedicated connection inherits the client's retryStrategy: 300 ms keeps it
    // down long enough to forget a key meanwhile.
    client = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions(), retryStrategy: () => 300 });
    admin = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() });
    store = await nearStore(client);
  });
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
  });

  it('empties and switches off when its connection is killed, respects a forget made meanwhile, and comes back', async () => {
    const key = 'k-killed';
    await completeAndCache(store, key, 'before the kill');
    await completeAndCache(store, 'k-other', 'other');
    const id = trackingClientId(store);
    expect(id).toEqual(expect.any(Number));
    await admin.call('CLIENT', 'KILL', 'ID', String(id));
    await until(() => !stats(store).enabled, 'the near cache to switch off');
    expect(stats(store).entries).toBe(0);
    // A forget by someone else while no invalidation can arrive.
    expect(await admin.del(`${store.prefix}{${key}}`)).toBe(1);
    // Meanwhile claims go to Redis and are answered right.
    expect((await store.claim('k-other', { token: token(), leaseTtl: 30_000 })).record).toMatchObject({ result: 'other' });
    await until(() => stats(store).enabled, 'the near cache to switch on again');
    expect(trackingClientId(store)).not.toBe(id);
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
    // And it caches again.
    await replayUntilCached(store, 'k-other', 'other');
  });

  it('close() ends its own connection and leaves the client passed in connected', async () => {
    const own = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
    await own.verify();
    await until(() => stats(own).enabled, 'the near cache to switch on');
    const id = trackingClientId(own)!;
    await own.close();
    expect(stats(own).enabled).toBe(false);
    expect(client.status).toBe('ready');
    expect(await client.ping()).toBe('PONG');
    await until(async () => !String(await admin.call('CLIENT', 'LIST')).includes(`id=${id} `), 'the tracking connection to go');
    // The store keeps working, every claim going to Redis.
    expect((await own.claim('k-after-close', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });
});

describe('near cache without proof of delivery', () => {
  it('never answers from memory when invalidations do not arrive, and reports it as a store error', async () => {
    const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
    await client.connect();
    // Over RESP3 (ioredis 6's default) invalidations come as push frames that ioredis
    // drops: forcing it back on the dedicated connection must leave the cache off.
    const duplicate = client.duplicate.bind(client);
    jest.spyOn(client, 'duplicate').mockImplementation((override) => duplicate({ ...override, protocol: 3 }));
    const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true, timeout: 300 });
    const errors: string[] = [];
    store.addEventListener((event) => errors.push(`${event.type}: ${event.reason}: ${(event.error as Error)?.message}`));
    try {
      await store.verify();
      await until(() => errors.length > 0, 'the failed probe to be reported');
      expect(errors[0]).toMatch(
        /store_error: RedisIdempotencyStore: the near cache could not switch on.*probe key did not arrive within 300 ms/,
      );
      const first = token();
      await store.claim('k', { token: first, leaseTtl: 30_000 });
      await store.complete('k', first, { result: 'r', ttl: 60_000 });
      for (let i = 0; i < 5; i++)
        expect((await store.claim('k', { token: token(), leaseTtl: 30_000 })).record).toMatchObject({ result: 'r' });
      expect(stats(store)).toMatchObject({ enabled: false, entries: 0, hits: 0 });
    } finally {
      await store.close();
      client.disconnect();
    }
  });
});

describe('near cache on a Redis that hangs', () => {
  // SIGSTOP: the sockets stay open and nothing answers, as in a network partition. Only
  // the heartbeat (a PING every 5 s on the tracking connection) can tell.
  let server: RedisServerHandle;
  let client: Redis;
  let store: RedisIdempotencyStore;
  let frozen = false;

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, ...recommendedRedisOptions({ commandTimeout: 300 }) });
    client.on('error', () => undefined);
    await client.connect();
    store = await nearStore(client, { timeout: 300 });
    store.addEventListener(() => undefined);
  }, 30_000);
  afterAll(async () => {
    if (frozen) server.signal('SIGCONT');
    await store?.close();
    client?.disconnect();
    await server?.stop();
  });

  it('switches off and empties when its connection stops answering, and comes back once Redis does', async () => {
    await completeAndCache(store, 'k-hung', 'kept');
    server.signal('SIGSTOP');
    frozen = true;
    await until(() => !stats(store).enabled, 'the heartbeat to switch the cache off', 15_000);
    expect(stats(store).entries).toBe(0);
    server.signal('SIGCONT');
    frozen = false;
    await until(() => stats(store).enabled, 'the near cache to switch on again', 15_000);
    await replayUntilCached(store, 'k-hung', 'kept');
  }, 40_000);
});

describe('near cache: a claim in flight when its key is invalidated', () => {
  let client: Redis;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    client = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() });
    admin = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() });
    store = await nearStore(client);
  });
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
  });

  /**
   * Holds the reply of the next claim script sent for `redisKey` until `during` has run.
   * A key the cache means to keep is claimed tracked (`'client'` mode), sent as EVAL.
   */
  function holdNextClaimOf(redisKey: string, during: () => Promise<void>): () => void {
    const restore: (() => void)[] = [];
    let held = false;
    for (const method of ['evalsha', 'eval'] as const) {
      const original = client[method].bind(client) as (...args: unknown[]) => Promise<unknown>;
      const spy = jest.spyOn(client, method) as unknown as jest.SpyInstance;
      spy.mockImplementation(async (...args: unknown[]) => {
        if (held || args[2] !== redisKey) return original(...args);
        held = true;
        const reply = await original(...args);
        await during();
        return reply;
      });
      restore.push(() => spy.mockRestore());
    }
    return () => {
      for (const undo of restore) undo();
      expect(held).toBe(true);
    };
  }

  /** Runs `key` to completion with `result`; one replay makes it a key the next claim caches. */
  async function completeOnce(key: string, result: string): Promise<void> {
    const first = token();
    expect((await store.claim(key, { token: first, leaseTtl: 30_000 })).claimed).toBe(true);
    expect(await store.complete(key, first, { result, ttl: 60_000 })).toBe(true);
    expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result } });
    expect(stats(store).entries).toBe(0);
  }

  it('does not cache a completed record read before a delete whose invalidation arrived first', async () => {
    const key = 'k-race';
    const redisKey = `${store.prefix}{${key}}`;
    await completeOnce(key, 'old');
    const release = holdNextClaimOf(redisKey, async () => {
      const seen = stats(store).invalidations;
      expect(await admin.del(redisKey)).toBe(1);
      await until(() => stats(store).invalidations > seen, 'the invalidation of the delete');
    });
    try {
      // Read before the delete: a replay of 'old', which is right for this claim...
      expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result: 'old' } });
    } finally {
      release();
    }
    // ...but must not be kept: the key is gone, the next claim owns it.
    expect(stats(store).entries).toBe(0);
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('does not cache a completed record read by a claim still in flight when this store deletes the key', async () => {
    const key = 'k-race-own-delete';
    await completeOnce(key, 'old');
    let deleted: Promise<boolean> | undefined;
    const release = holdNextClaimOf(`${store.prefix}{${key}}`, async () => {
      deleted = store.delete(key);
      await deleted;
    });
    try {
      expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result: 'old' } });
    } finally {
      release();
    }
    expect(await deleted).toBe(true);
    expect(stats(store).entries).toBe(0);
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('caches the record once nothing invalidated it meanwhile (the two cases above, without the delete)', async () => {
    const key = 'k-race-control';
    await completeOnce(key, 'kept');
    const release = holdNextClaimOf(`${store.prefix}{${key}}`, async () => undefined);
    try {
      expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result: 'kept' } });
    } finally {
      release();
    }
    expect(stats(store).entries).toBe(1);
  });
});

describe('near cache bounds', () => {
  let client: Redis;
  const stores: RedisIdempotencyStore[] = [];

  beforeAll(() => {
    client = new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() });
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    client?.disconnect();
  });

  async function bounded(options: RedisIdempotencyStoreOptions['nearCache']): Promise<RedisIdempotencyStore> {
    const store = await nearStore(client, { nearCache: options });
    stores.push(store);
    return store;
  }

  it('keeps at most maxEntries, dropping the oldest inserted first', async () => {
    const store = await bounded({ maxEntries: 3 });
    for (let i = 0; i < 5; i++) await completeAndCache(store, `k${i}`, `r${i}`);
    expect(stats(store)).toMatchObject({ entries: 3, evictions: 2 });
    const evalsha = jest.spyOn(client, 'evalsha');
    try {
      for (const i of [2, 3, 4]) await store.claim(`k${i}`, { token: token(), leaseTtl: 30_000 });
      expect(evalsha).not.toHaveBeenCalled();
      // k0 was dropped: its claim goes to Redis (and gets the right answer there).
      expect((await store.claim('k0', { token: token(), leaseTtl: 30_000 })).record).toMatchObject({ result: 'r0' });
      expect(evalsha).toHaveBeenCalledTimes(1);
    } finally {
      evalsha.mockRestore();
    }
  });

  it('keeps the counted bytes within maxBytes, and does not cache a record above an eighth of it', async () => {
    // Each record below counts 400 + 2 * (key + result + lease token) bytes: about 2.5 KB.
    const result = 'x'.repeat(1_000);
    const store = await bounded({ maxBytes: 6_000 * 8 });
    for (let i = 0; i < 30; i++) await completeAndCache(store, `b${i}`, result + i);
    const { bytes, entries, evictions } = stats(store);
    expect(bytes).toBeLessThanOrEqual(6_000 * 8);
    expect(entries).toBeGreaterThan(1);
    expect(evictions).toBe(30 - entries);

    const big = await bounded({ maxBytes: 8_000 });
    const first = token();
    await big.claim('huge', { token: first, leaseTtl: 30_000 });
    await big.complete('huge', first, { result: 'y'.repeat(600), ttl: 60_000 });
    for (let i = 0; i < 5; i++) await big.claim('huge', { token: token(), leaseTtl: 30_000 });
    expect(stats(big)).toMatchObject({ entries: 0, hits: 0 });
  });

  it('refuses what it cannot do, at construction, with the fix', () => {
    const fakeCluster = { eval: jest.fn(), evalsha: jest.fn(), ping: jest.fn(), isCluster: true, duplicate: jest.fn() };
    expect(() => new RedisIdempotencyStore(fakeCluster, { nearCache: true })).toThrow(IdempotencyConfigurationError);
    expect(() => new RedisIdempotencyStore(fakeCluster, { nearCache: true })).toThrow(
      /not available with a Redis Cluster client.*remove the nearCache option/,
    );
    expect(() => new RedisIdempotencyStore(fakeCluster)).not.toThrow();
    const noDuplicate = { eval: jest.fn(), evalsha: jest.fn(), ping: jest.fn() };
    expect(() => new RedisIdempotencyStore(noDuplicate, { nearCache: {} })).toThrow(/needs a client with duplicate\(\)/);
    expect(() => new RedisIdempotencyStore(client, { nearCache: { maxEntries: 0 } })).toThrow(
      /nearCache\.maxEntries must be a whole number above 0, got 0\. Write nearCache\.maxEntries: 10_000/,
    );
    expect(() => new RedisIdempotencyStore(client, { nearCache: { maxAge: 1.5 } })).toThrow(
      /nearCache\.maxAge must be a whole number of milliseconds above 0, got 1\.5/,
    );
    expect(() => new RedisIdempotencyStore(client, { nearCache: { maxBytes: Number.NaN } })).toThrow(IdempotencyConfigurationError);
    expect(() => new RedisIdempotencyStore(client, { nearCache: 'yes' as never })).toThrow(
      /nearCache must be true, false or an options object/,
    );
    // Off: nothing opened, no stats.
    expect(new RedisIdempotencyStore(client, { nearCache: false }).nearCacheStats()).toBeUndefined();
    expect(fakeCluster.duplicate).not.toHaveBeenCalled();
  });

  it('opens nothing until the first claim (or verify)', async () => {
    const duplicate = jest.spyOn(client, 'duplicate');
    try {
      const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
      stores.push(store);
      expect(duplicate).not.toHaveBeenCalled();
      expect((await store.claim('k', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
      expect(duplicate).toHaveBeenCalledTimes(1);
    } finally {
      duplicate.mockRestore();
    }
  });
});

describe('IdempotencyService closes the stores it uses on shutdown', () => {
  it('starts the near cache at boot (verify) and closes its connection when the application closes, not the client', async () => {
    const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
    await client.connect();
    const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
    try {
      const moduleRef = await Test.createTestingModule({ imports: [IdempotencyModule.forRoot({ store, logger: false })] }).compile();
      const app = moduleRef.createNestApplication();
      await app.init();
      await until(() => stats(store).enabled, 'the near cache to switch on after app.init()');
      await app.close();
      expect(stats(store).enabled).toBe(false);
      expect(trackingClientId(store)).toBeUndefined();
      expect(await client.ping()).toBe('PONG');
    } finally {
      await store.close();
      client.disconnect();
    }
  });

  it('closes the module store and each handler store once, and logs a failing close', async () => {
    const closable = () => ({ close: jest.fn(async () => undefined) }) as unknown as IdempotencyStore & { close: jest.Mock };
    const own = closable();
    const handlerStore = closable();
    const failing = { close: jest.fn(async () => Promise.reject(new Error('boom'))) } as unknown as IdempotencyStore & { close: jest.Mock };
    const warnings: string[] = [];
    const service = new IdempotencyService({
      store: own,
      logger: { log: () => undefined, error: () => undefined, warn: (message: string) => void warnings.push(message) },
    });
    service.watchStore(handlerStore);
    service.watchStore(handlerStore);
    service.watchStore(failing);
    service.watchStore(own);
    await service.onModuleDestroy();
    await service.onModuleDestroy();
    expect(own.close).toHaveBeenCalledTimes(1);
    expect(handlerStore.close).toHaveBeenCalledTimes(1);
    expect(failing.close).toHaveBeenCalledTimes(1);
    expect(warnings.join('\n')).toMatch(/failed to close: boom/);
  });
});
