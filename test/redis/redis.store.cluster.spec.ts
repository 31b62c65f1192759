import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Cluster } from 'ioredis';
import { Cluster as Cluster5 } from 'ioredis5';
import { RedisIdempotencyStore, recommendedRedisClusterOptions } from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-servers.js';

// A real 3-master Redis Cluster started by this file: every script must stay within
// one hash slot, and the records must spread over all masters.
let cluster: RedisClusterHandle;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

async function connected<T extends Cluster | Cluster5>(client: T): Promise<T> {
  // The recommended options disable the offline queue, so wait until the slots are known.
  await once(client, 'ready');
  return client;
}

describeStoreContract('RedisIdempotencyStore (ioredis 6, 3-master Cluster)', async () => {
  const client = await connected(new Cluster(cluster.nodes, recommendedRedisClusterOptions()));
  return { store: new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` }), dispose: () => void client.disconnect() };
});

describeStoreContract('RedisIdempotencyStore (ioredis 5, 3-master Cluster)', async () => {
  const client = await connected(new Cluster5(cluster.nodes, recommendedRedisClusterOptions()));
  return { store: new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` }), dispose: () => void client.disconnect() };
});

describe('RedisIdempotencyStore on a Cluster', () => {
  it('spreads records over every master, each script within its key slot', async () => {
    const client = await connected(new Cluster(cluster.nodes, recommendedRedisClusterOptions()));
    try {
      const store = new RedisIdempotencyStore(client, { prefix: `test:idem:${randomUUID()}:` });
      const keys = Array.from({ length: 60 }, () => 'k' + randomUUID().replace(/-/g, ''));
      for (const key of keys) {
        const claim = await store.claim(key, { token: 't-' + key, leaseTtl: 10_000 });
        expect(claim.claimed).toBe(true);
        expect(await store.complete(key, 't-' + key, { result: 'r-' + key, ttl: 10_000 })).toBe(true);
      }
      const perMaster = await Promise.all(client.nodes('master').map((node) => node.dbsize()));
      expect(perMaster).toHaveLength(3);
      for (const count of perMaster) expect(count).toBeGreaterThan(0);
      for (const key of keys) expect(await store.get(key)).toMatchObject({ status: 'completed', result: 'r-' + key });
    } finally {
      client.disconnect();
    }
  });
});
