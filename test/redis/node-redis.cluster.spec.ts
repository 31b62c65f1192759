import { randomUUID } from 'node:crypto';
import { createCluster } from 'redis';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import {
  RedisIdempotencyStore,
  RedisLockProvider,
  RedisOneTimeTokenStore,
  recommendedNodeRedisClusterOptions,
} from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-servers.js';

// A real 3-master Redis Cluster started by this file, on node-redis 6's createCluster().
let cluster: RedisClusterHandle;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

function newCluster(resp: 2 | 3 = 3) {
  const client = createCluster({
    rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
    RESP: resp,
    ...recommendedNodeRedisClusterOptions(),
  });
  client.on('error', () => undefined);
  return client;
}

describeStoreContract('RedisIdempotencyStore (node-redis 6, 3-master Cluster)', async () => {
  const client = newCluster();
  const store = new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` });
  // The store's boot wait connects a cluster not connected yet.
  await store.verify();
  return { store, dispose: () => client.destroy() };
});

describeStoreContract('RedisIdempotencyStore (node-redis 6, 3-master Cluster, RESP2)', async () => {
  const client = newCluster(2);
  await client.connect();
  return { store: new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` }), dispose: () => client.destroy() };
});

describe('RedisIdempotencyStore on a node-redis Cluster', () => {
  it('spreads records over every master, each script within its key slot', async () => {
    const client = newCluster();
    await client.connect();
    try {
      const store = new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` });
      const keys = Array.from({ length: 60 }, () => 'k' + randomUUID().replace(/-/g, ''));
      for (const key of keys) {
        expect((await store.claim(key, { token: 't-' + key, leaseTtl: 10_000 })).claimed).toBe(true);
        expect(await store.complete(key, 't-' + key, { result: 'r-' + key, ttl: 10_000 })).toBe(true);
      }
      const perMaster = await Promise.all(client.masters.map(async (master) => (await client.nodeClient(master)).dbSize()));
      expect(perMaster).toHaveLength(3);
      for (const count of perMaster) expect(count).toBeGreaterThan(0);
      for (const key of keys) expect(await store.get(key)).toMatchObject({ status: 'completed', result: 'r-' + key });
      await store.ping();
    } finally {
      client.destroy();
    }
  });

  it('runs one-time tokens and locks on it', async () => {
    const client = newCluster();
    await client.connect();
    try {
      const tokens = new RedisOneTimeTokenStore(client, { prefix: `test:tok:${randomUUID()}:` });
      expect(await tokens.save('a', 10_000)).toBe(true);
      const consumed = await Promise.all(Array.from({ length: 10 }, () => tokens.consume('a')));
      expect(consumed.filter((result) => result === 'consumed')).toHaveLength(1);
      expect(consumed.filter((result) => result === 'already_used')).toHaveLength(9);
      const locks = new RedisLockProvider(client, { prefix: `test:lock:${randomUUID()}:` });
      const held = await locks.acquire('r', { ttl: 10_000 });
      expect(held).toBeDefined();
      expect(await locks.acquire('r', { ttl: 10_000 })).toBeUndefined();
      await held!.release();
      expect(await locks.acquire('r', { ttl: 10_000 })).toBeDefined();
    } finally {
      client.destroy();
    }
  });

  it('refuses the near cache at construction, naming the fix', () => {
    const client = newCluster();
    expect(() => new RedisIdempotencyStore(client, { nearCache: true })).toThrow(IdempotencyConfigurationError);
    expect(() => new RedisIdempotencyStore(client, { nearCache: true })).toThrow(/nearCache is not available with a Redis Cluster client/);
  });
});
