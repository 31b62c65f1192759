import { randomUUID } from 'node:crypto';
import {
  RedisIdempotencyStore,
  RedisOneTimeTokenStore,
  recommendedNodeRedisClusterOptions,
  recommendedNodeRedisOptions,
} from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-servers.js';

/**
 * node-redis 5 through the `redis5` alias devDependency (`"redis5": "npm:redis@^5"`), as
 * ioredis 5 runs through `ioredis5`: RESP2 by default, no keyPrefix, and a Cluster
 * without `isReady` (the boot wait knows it by its masters).
 */
type NodeRedis5 = typeof import('redis');
// Typed as node-redis 6 (the two share the API this suite uses); loaded from the alias.
const redis5 = require('redis5') as NodeRedis5;
const url = 'redis://127.0.0.1:6379';
const prefix = () => `test:idem:${randomUUID()}:`;

describeStoreContract('RedisIdempotencyStore (node-redis 5, standalone)', async () => {
  const client = redis5.createClient({ url, ...recommendedNodeRedisOptions() });
  const store = new RedisIdempotencyStore(client, { prefix: prefix() });
  await store.verify(); // connects it
  return { store, dispose: () => client.destroy() };
});

describe('node-redis 5', () => {
  let cluster: RedisClusterHandle;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('a Cluster (no isReady) is connected by the boot wait and serves the store', async () => {
    const client = redis5.createCluster({
      rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
      ...recommendedNodeRedisClusterOptions(),
    });
    client.on('error', () => undefined);
    try {
      const store = new RedisIdempotencyStore(client, { prefix: prefix() });
      await store.verify();
      for (let i = 0; i < 30; i++) {
        expect((await store.claim(`k${i}`, { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
        expect(await store.complete(`k${i}`, 't', { result: 'r', ttl: 10_000 })).toBe(true);
      }
      expect((await store.claim('k1', { token: 'u', leaseTtl: 10_000 })).record.status).toBe('completed');
    } finally {
      client.destroy();
    }
  });

  it('the near cache answers a replay from memory; tokens are consumed once', async () => {
    const client = redis5.createClient({ url, ...recommendedNodeRedisOptions() });
    await client.connect();
    const store = new RedisIdempotencyStore(client, { prefix: prefix(), nearCache: true });
    try {
      await store.verify();
      const deadline = Date.now() + 10_000;
      while (!store.nearCacheStats()!.enabled && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      expect((await store.claim('k', { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
      expect(await store.complete('k', 't', { result: 'r', ttl: 60_000 })).toBe(true);
      while (store.nearCacheStats()!.hits === 0 && Date.now() < deadline) {
        expect((await store.claim('k', { token: 'u', leaseTtl: 10_000 })).record).toMatchObject({ result: 'r' });
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      expect(store.nearCacheStats()!.hits).toBeGreaterThan(0);
      const tokens = new RedisOneTimeTokenStore(client, { prefix: prefix() });
      expect(await tokens.save('a', 10_000)).toBe(true);
      expect(await Promise.all([tokens.consume('a'), tokens.consume('a')])).toEqual(['consumed', 'already_used']);
    } finally {
      await store.close();
      client.destroy();
    }
  });
});
