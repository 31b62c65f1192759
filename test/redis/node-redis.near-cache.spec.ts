import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient, type RedisClientOptions, type RespVersions } from 'redis';
import { RedisIdempotencyStore, recommendedNodeRedisOptions, type RedisIdempotencyStoreOptions } from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * The near cache on node-redis: its connection is a RESP2 duplicate of the user's client
 * (whatever RESP the client speaks), in CLIENT TRACKING BCAST mode redirected to itself,
 * driven by the same tracking code as with ioredis. Nothing here waits a fixed time: it
 * polls a condition with a deadline. The admin connection is ioredis (any client would do).
 */
const prefix = () => `test:near:${randomUUID()}:`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const url = 'redis://127.0.0.1:6379';

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

type NodeRedis = ReturnType<typeof createClient>;

async function connected(options: Omit<RedisClientOptions, 'RESP'> & { RESP?: RespVersions } = {}): Promise<NodeRedis> {
  const client = createClient({ url, ...recommendedNodeRedisOptions(), ...options }) as NodeRedis;
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function nearStore(client: NodeRedis, options: RedisIdempotencyStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true, ...options });
  await store.verify();
  await until(() => stats(store).enabled, 'the near cache to switch on');
  return store;
}

let tokens = 0;
const token = () => `t${++tokens}`;

async function completeAndCache(store: RedisIdempotencyStore, key: string, result: string): Promise<void> {
  const first = token();
  expect((await store.claim(key, { token: first, leaseTtl: 30_000 })).claimed).toBe(true);
  expect(await store.complete(key, first, { result, ttl: 60_000 })).toBe(true);
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

describeStoreContract('RedisIdempotencyStore with nearCache (node-redis 6)', async () => {
  const client = await connected();
  const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
  return {
    store,
    dispose: async () => {
      await store.close();
      client.destroy();
    },
  };
});

describe.each([3, 2] as const)('near cache on node-redis 6, the client speaking RESP%s', (resp) => {
  let client: NodeRedis;
  let admin: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    client = await connected({ RESP: resp });
    admin = new Redis({ host: '127.0.0.1', port: 6379 });
    store = await nearStore(client);
    // The killed connection below is reported as a store error: listened to, not printed.
    store.addEventListener(() => undefined);
  });
  afterAll(async () => {
    await store?.close();
    client?.destroy();
    admin?.disconnect();
  });

  it('answers a replay from memory: later replays send no command at all', async () => {
    // node-redis: BCAST on the cache's own connection (the client's connection is not driven directly).
    expect(stats(store).tracking).toBe('broadcast');
    await completeAndCache(store, 'k-replay', 'stored result');
    const sent = [jest.spyOn(client, 'evalSha'), jest.spyOn(client, 'eval')];
    try {
      const before = stats(store).hits;
      for (let i = 0; i < 50; i++) {
        expect(await store.claim('k-replay', { token: token(), leaseTtl: 30_000 })).toEqual({
          claimed: false,
          record: expect.objectContaining({ status: 'completed', result: 'stored result' }),
        });
      }
      for (const command of sent) expect(command).not.toHaveBeenCalled();
      expect(stats(store).hits - before).toBe(50);
    } finally {
      for (const command of sent) command.mockRestore();
    }
  });

  it('hears a delete by another connection', async () => {
    await completeAndCache(store, 'k-del', 'r');
    expect(await admin.del(`${store.prefix}{k-del}`)).toBe(1);
    await until(async () => (await store.claim('k-del', { token: token(), leaseTtl: 30_000 })).claimed, 'the delete to be heard');
  });

  it('empties and switches off when its connection is killed, respects a forget made meanwhile, and comes back on a new connection', async () => {
    const key = 'k-killed';
    await completeAndCache(store, key, 'before the kill');
    await completeAndCache(store, 'k-other', 'other');
    const id = trackingClientId(store);
    expect(id).toEqual(expect.any(Number));
    await admin.call('CLIENT', 'KILL', 'ID', String(id));
    await until(() => !stats(store).enabled, 'the near cache to switch off');
    expect(stats(store).entries).toBe(0);
    expect(await admin.del(`${store.prefix}{${key}}`)).toBe(1);
    expect((await store.claim('k-other', { token: token(), leaseTtl: 30_000 })).record).toMatchObject({ result: 'other' });
    await until(() => stats(store).enabled, 'the near cache to switch on again');
    expect(trackingClientId(store)).not.toBe(id);
    expect((await store.claim(key, { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
    await replayUntilCached(store, 'k-other', 'other');
  });

  it('close() ends its own connection and leaves the client passed in connected', async () => {
    const own = await nearStore(client);
    const id = trackingClientId(own)!;
    await own.close();
    expect(stats(own).enabled).toBe(false);
    expect(client.isReady).toBe(true);
    await until(async () => !String(await admin.call('CLIENT', 'LIST')).includes(`id=${id} `), 'the tracking connection to go');
    expect((await own.claim('k-after-close', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
  });
});

describe('near cache on node-redis: FLUSHDB and the keyPrefix', () => {
  let server: RedisServerHandle;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('empties itself on FLUSHDB and keeps answering afterwards', async () => {
    const client = await connected({ url: `redis://127.0.0.1:${server.port}` });
    const store = await nearStore(client);
    try {
      await completeAndCache(store, 'k-flush', 'r');
      await client.flushDb();
      await store.syncNearCache();
      expect(stats(store).entries).toBe(0);
      expect((await store.claim('k-flush', { token: token(), leaseTtl: 30_000 })).claimed).toBe(true);
      expect(await store.complete('k-flush', `t${tokens}`, { result: 'again', ttl: 60_000 })).toBe(true);
      await replayUntilCached(store, 'k-flush', 'again');
    } finally {
      await store.close();
      client.destroy();
    }
  });

  it("tracks the keys as Redis names them (node-redis 6's keyPrefix + prefix), so a delete by another connection is heard", async () => {
    const keyPrefix = `kp:${randomUUID()}:`;
    const client = await connected({ url: `redis://127.0.0.1:${server.port}`, keyPrefix });
    const admin = new Redis({ host: '127.0.0.1', port: server.port });
    const store = await nearStore(client);
    try {
      await completeAndCache(store, 'k', 'r');
      expect(await admin.del(`${keyPrefix}${store.prefix}{k}`)).toBe(1);
      await until(async () => (await store.claim('k', { token: token(), leaseTtl: 30_000 })).claimed, 'the delete to be heard');
    } finally {
      await store.close();
      client.destroy();
      admin.disconnect();
    }
  });

  it('switches off when Redis hangs (SIGSTOP) and comes back once Redis answers again', async () => {
    const client = await connected({ url: `redis://127.0.0.1:${server.port}` });
    const store = await nearStore(client, { timeout: 300 });
    store.addEventListener(() => undefined);
    let frozen = false;
    try {
      await completeAndCache(store, 'k-hung', 'kept');
      server.signal('SIGSTOP');
      frozen = true;
      await until(() => !stats(store).enabled, 'the heartbeat to switch the cache off', 15_000);
      expect(stats(store).entries).toBe(0);
      server.signal('SIGCONT');
      frozen = false;
      await until(() => stats(store).enabled, 'the near cache to switch on again', 15_000);
      await replayUntilCached(store, 'k-hung', 'kept');
    } finally {
      if (frozen) server.signal('SIGCONT');
      await store.close();
      client.destroy();
    }
  }, 40_000);
});
