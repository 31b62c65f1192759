/**
 * node-redis (`redis` 6) stores of the fault suites, each reached through fault proxies:
 * the shared Redis (a prefix per run) with `recommendedNodeRedisOptions()`, and a Redis
 * Cluster of the suite's own with `recommendedNodeRedisClusterOptions()` (one proxy per
 * node, the nodes' announced addresses mapped onto the proxies by `nodeAddressMap`).
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { RedisIdempotencyStore, recommendedNodeRedisClusterOptions, recommendedNodeRedisOptions } from '../../../lib/redis/index.js';
import { startFaultProxy } from '../../support/fault-proxy.js';
import { startRedisCluster } from '../../support/redis-servers.js';
import type { FaultBackendOptions, FaultStore } from './stores.js';

const tag = () => `${process.pid}_${randomBytes(4).toString('hex')}`;

/** Closing a client whose connections a fault cut may hang; the test is over by then. */
function closeQuietly(client: { destroy(): void }): Promise<void> {
  try {
    client.destroy();
  } catch {
    // already closed
  }
  return Promise.resolve();
}

export async function nodeRedisFaultStore(): Promise<FaultStore> {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: 6379 });
  const prefix = `faults:${tag()}:`;
  return {
    name: 'node-redis',
    proxies: [proxy],
    async openBackend({ storeTimeout }: FaultBackendOptions = {}) {
      const client = createClient({ url: `redis://127.0.0.1:${proxy.port}`, ...recommendedNodeRedisOptions() });
      client.on('error', () => undefined);
      return { store: new RedisIdempotencyStore(client, { prefix, timeout: storeTimeout }), close: () => closeQuietly(client) };
    },
    async dispose() {
      await proxy.stop();
      const admin = new Redis({ host: '127.0.0.1', port: 6379 });
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  };
}

export async function nodeRedisClusterFaultStore(): Promise<FaultStore> {
  const cluster = await startRedisCluster({ masters: 3 });
  const proxies = await Promise.all(cluster.nodes.map((node) => startFaultProxy(node)));
  const nodeAddressMap = Object.fromEntries(cluster.nodes.map((node, i) => [`${node.host}:${node.port}`, proxies[i].address]));
  const prefix = `{faults}:${tag()}:`;
  return {
    name: 'node-redis Cluster',
    proxies,
    async openBackend({ storeTimeout }: FaultBackendOptions = {}) {
      const client = createCluster({
        rootNodes: proxies.map((proxy) => ({ url: `redis://127.0.0.1:${proxy.port}` })),
        nodeAddressMap,
        ...recommendedNodeRedisClusterOptions(),
      });
      client.on('error', () => undefined);
      return { store: new RedisIdempotencyStore(client, { prefix, timeout: storeTimeout }), close: () => closeQuietly(client) };
    },
    async dispose() {
      await Promise.all(proxies.map((proxy) => proxy.stop()));
      await cluster.stop();
    },
  };
}
