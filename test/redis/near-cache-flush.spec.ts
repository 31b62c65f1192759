import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
import { RedisIdempotencyStore, recommendedRedisOptions, type RedisIdempotencyStoreOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * The near cache and the commands that remove records without naming them: FLUSHDB and
 * FLUSHALL (Redis sends one invalidation without a key, just after it answered the
 * flushing client) and SWAPDB (Redis sends nothing). Each suite runs on a redis-server of
 * its own, as these commands would wipe the shared one. Nothing waits a fixed time: every
 * wait polls a condition with a deadline.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const PEER = join(__dirname, 'fixtures', 'near-cache-flush-peer.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');
/** The heartbeat of lib/redis/near-cache.ts: the database's identity is read this often. */
const HEARTBEAT_MS = 5_000;
/** The stores' `timeout` here, which bounds each identity read. */
const TIMEOUT_MS = 500;

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await sleep(2);
  }
}

const stats = (store: RedisIdempotencyStore) => store.nearCacheStats()!;
let tokens = 0;
const token = () => `t${++tokens}`;

async function nearStore(client: Redis | Redis5, options: RedisIdempotencyStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const store = new RedisIdempotencyStore(client as Redis, {
    prefix: `test:near-flush:${randomUUID()}:`,
    nearCache: true,
    timeout: TIMEOUT_MS,
    ...options,
  });
  await store.verify();
  await until(() => stats(store).enabled, 'the near cache to switch on');
  return store;
}

/** Completes `key`, then replays it until a replay is answered from memory. */
async function completeAndCache(store: RedisIdempotencyStore, key: string, result = 'stored'): Promise<void> {
  const first = token();
  expect((await store.claim(key, { token: first, leaseTtl: 30_000 })).claimed).toBe(true);
  expect(await store.complete(key, first, { result, ttl: 60_000 })).toBe(true);
  await until(async () => {
    const hits = stats(store).hits;
    expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result } });
    return stats(store).hits > hits;
  }, `${key} to be answered from the near cache`);
}

/** True when a claim of `key` now finds it absent (claims it, then releases it). */
async function isGone(store: RedisIdempotencyStore, key: string): Promise<boolean> {
  const mine = token();
  const claim = await store.claim(key, { token: mine, leaseTtl: 30_000 });
  if (claim.claimed) await store.release(key, mine);
  return claim.claimed;
}

describe.each([
  ['ioredis 6 (RESP3 by default)', (port: number) => new Redis({ host: '127.0.0.1', port, ...recommendedRedisOptions() })],
  ['ioredis 5 (RESP2)', (port: number) => new Redis5({ host: '127.0.0.1', port, ...recommendedRedisOptions() })],
])('near cache and FLUSHDB / FLUSHALL / SWAPDB, %s', (_name, connect) => {
  let server: RedisServerHandle;
  let client: Redis | Redis5;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    server = await startRedisServer();
    client = connect(server.port);
    admin = new Redis({ host: '127.0.0.1', port: server.port, ...recommendedRedisOptions() });
    store = await nearStore(client);
  }, 30_000);
  afterAll(async () => {
    await store?.close();
    client?.disconnect();
    admin?.disconnect();
    await server?.stop();
  });

  it('never replays a flushed record once syncNearCache() resolved after the flush (FLUSHDB and FLUSHALL, 100 rounds)', async () => {
    let stale = 0;
    for (let round = 0; round < 100; round++) {
      const key = `k-flush-${round}`;
      await completeAndCache(store, key);
      await (round % 2 === 0 ? admin.flushdb() : admin.flushall());
      await store.syncNearCache();
      if (!(await isGone(store, key))) stale++;
    }
    expect(stale).toBe(0);
    expect(stats(store).enabled).toBe(true);
  }, 60_000);

  it('does not cache a completed record read before a FLUSHALL whose invalidation arrived first', async () => {
    const key = 'k-flush-race';
    const first = token();
    expect((await store.claim(key, { token: first, leaseTtl: 30_000 })).claimed).toBe(true);
    expect(await store.complete(key, first, { result: 'old', ttl: 60_000 })).toBe(true);
    // The invalidations of those two writes are in: only the flush below can keep the reply out.
    await store.syncNearCache();
    // The next claim's reply (the record before the flush) is held until the flush's invalidation is in.
    const original = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>;
    const spy = jest.spyOn(client, 'evalsha') as unknown as jest.SpyInstance;
    spy.mockImplementationOnce(async (...args: unknown[]) => {
      const reply = await original(...args);
      const seen = stats(store).invalidations;
      await admin.flushall();
      await until(() => stats(store).invalidations > seen, 'the invalidation of the flush');
      return reply;
    });
    try {
      expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result: 'old' } });
    } finally {
      spy.mockRestore();
    }
    expect(stats(store).entries).toBe(0);
    expect(await isGone(store, key)).toBe(true);
  });

  it('notices a SWAPDB within a heartbeat plus the timeout, and answers from the database swapped in', async () => {
    const key = 'k-swapped';
    await completeAndCache(store, key, 'from db 0');
    await admin.swapdb(0, 1);
    const swapped = performance.now();
    // Until the heartbeat reads the database's identity, the record of db 0 may still be answered...
    await until(() => isGone(store, key), 'the swapped-out record to stop being answered', HEARTBEAT_MS + TIMEOUT_MS + 5_000);
    // ...and never later than a heartbeat plus the timeout after the swap.
    expect(performance.now() - swapped).toBeLessThan(HEARTBEAT_MS + TIMEOUT_MS + 1_000);
    await admin.swapdb(0, 1);
    await store.syncNearCache();
    // The record is back in db 0: it is answered (from Redis, then from memory) again.
    await completeAndCacheAgain(store, key, 'from db 0');
  }, 30_000);

  it('never replays a swapped-out record once syncNearCache() resolved after the SWAPDB (20 rounds)', async () => {
    let stale = 0;
    for (let round = 0; round < 20; round++) {
      const key = `k-swap-${round}`;
      await completeAndCache(store, key);
      await admin.swapdb(0, 1);
      await store.syncNearCache();
      if (!(await isGone(store, key))) stale++;
    }
    expect(stale).toBe(0);
  }, 60_000);
});

/** Replays `key`, known completed in Redis with `result`, until a replay is answered from memory. */
async function completeAndCacheAgain(store: RedisIdempotencyStore, key: string, result: string): Promise<void> {
  await until(async () => {
    const hits = stats(store).hits;
    expect(await store.claim(key, { token: token(), leaseTtl: 30_000 })).toMatchObject({ claimed: false, record: { result } });
    return stats(store).hits > hits;
  }, `${key} to be answered from the near cache again`);
}

describe('near cache: a flush while it proves delivery, or an identity it cannot read', () => {
  let server: RedisServerHandle;
  let client: Redis;
  let admin: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis({ host: '127.0.0.1', port: server.port, ...recommendedRedisOptions() });
    admin = new Redis({ host: '127.0.0.1', port: server.port, ...recommendedRedisOptions() });
  }, 30_000);
  afterAll(async () => {
    client?.disconnect();
    admin?.disconnect();
    await server?.stop();
  });

  it('switches on even when a FLUSHDB invalidation arrives while its probe is in flight', async () => {
    const store = new RedisIdempotencyStore(client, { prefix: `test:near-flush:${randomUUID()}:`, nearCache: true, timeout: TIMEOUT_MS });
    const original = client.eval.bind(client) as (...args: unknown[]) => Promise<unknown>;
    let flushed = false;
    const spy = jest.spyOn(client, 'eval') as unknown as jest.SpyInstance;
    spy.mockImplementation(async (...args: unknown[]) => {
      if (!flushed && String(args[2]).includes('__near-cache-probe__')) {
        flushed = true;
        const seen = stats(store).invalidations;
        await admin.flushdb();
        await until(() => stats(store).invalidations > seen, 'the invalidation of the flush');
      }
      return original(...args);
    });
    try {
      await store.verify();
      await until(() => stats(store).enabled, 'the near cache to switch on after a flush during its proof');
      expect(flushed).toBe(true);
      await completeAndCache(store, 'k-after-proof');
    } finally {
      spy.mockRestore();
      await store.close();
    }
  });

  it('stops answering from memory within a heartbeat plus the timeout once the identity cannot be read, and comes back', async () => {
    const store = await nearStore(client);
    try {
      await completeAndCache(store, 'k-unconfirmed', 'kept');
      const original = client.eval.bind(client) as (...args: unknown[]) => Promise<unknown>;
      const spy = jest.spyOn(client, 'eval') as unknown as jest.SpyInstance;
      spy.mockImplementation(async (...args: unknown[]) => {
        if (String(args[2]).endsWith('__near-cache-db__')) throw new Error('identity read refused by the test');
        return original(...args);
      });
      const failing = performance.now();
      try {
        // Every claim still answers right; after the bound none is answered from memory.
        await until(
          async () => {
            const hits = stats(store).hits;
            expect(await store.claim('k-unconfirmed', { token: token(), leaseTtl: 30_000 })).toMatchObject({ record: { result: 'kept' } });
            return stats(store).hits === hits;
          },
          'replays to go to Redis',
          HEARTBEAT_MS + TIMEOUT_MS + 5_000,
        );
        expect(performance.now() - failing).toBeLessThan(2 * HEARTBEAT_MS + TIMEOUT_MS + 1_000);
        expect(stats(store).enabled).toBe(true);
      } finally {
        spy.mockRestore();
      }
      await store.syncNearCache();
      await completeAndCacheAgain(store, 'k-unconfirmed', 'kept');
    } finally {
      await store.close();
    }
  }, 30_000);
});

describe('near cache: a flush made by another process', () => {
  let server: RedisServerHandle;
  let client: Redis;
  let store: RedisIdempotencyStore;
  let peer: ChildProcess;
  let nextId = 0;
  const replies = new Map<number, (reply: { ok: boolean; value?: unknown; error?: string }) => void>();

  function ask(request: { op: string; key?: string; sync?: boolean }): Promise<unknown> {
    const id = ++nextId;
    return new Promise((resolve, reject) => {
      replies.set(id, (reply) => (reply.ok ? resolve(reply.value) : reject(new Error(reply.error))));
      peer.send({ id, ...request });
    });
  }

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis({ host: '127.0.0.1', port: server.port, ...recommendedRedisOptions() });
    store = await nearStore(client);
    peer = fork(PEER, [], {
      execArgv: ['--require', TS_REQUIRE],
      env: { ...process.env, PREFIX: store.prefix, REDIS_PORT: String(server.port) },
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
    if (peer && peer.connected) await ask({ op: 'close' }).catch(() => undefined);
    if (peer && peer.exitCode === null) peer.kill('SIGKILL');
    await store?.close();
    client?.disconnect();
    await server?.stop();
  });

  it('never replays a record another process flushed, once told and synced (FLUSHDB, FLUSHALL, SWAPDB; 90 rounds)', async () => {
    let stale = 0;
    const ops = ['flushdb', 'flushall', 'swapdb'];
    for (let round = 0; round < 90; round++) {
      const key = `k-peer-${round}`;
      await completeAndCache(store, key);
      await ask({ op: ops[round % 3] });
      await store.syncNearCache();
      if (!(await isGone(store, key))) stale++;
    }
    expect(stale).toBe(0);
  }, 60_000);

  it('the flushing process never replays its own flushed record once it synced (50 rounds)', async () => {
    let stale = 0;
    for (let round = 0; round < 50; round++) {
      const key = `k-flusher-${round}`;
      expect(await ask({ op: 'cache', key })).toBe(true);
      if ((await ask({ op: 'flush-then-claim', key, sync: true })) === 'stale') stale++;
    }
    expect(stale).toBe(0);
  }, 60_000);
});
