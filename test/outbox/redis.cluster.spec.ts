import { once } from 'node:events';
import type { INestApplication } from '@nestjs/common';
import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import request from 'supertest';
import { IdempotencyConfigurationError, IdempotencyErrorCode, makeIdempotent } from '../../lib/index.js';
import {
  RedisIdempotencyStore,
  recommendedNodeRedisClusterOptions,
  recommendedRedisClusterOptions,
  type RedisIdempotencyStoreOptions,
} from '../../lib/redis/index.js';
import { uniqueName } from '../messages/support.js';
import { startRedisCluster, type RedisClusterHandle } from '../support/redis-servers.js';
import { startRefundsApi } from './apps.js';
import { emitTag, outboxPrefix } from './redis-support.js';

/**
 * Issue 44 on a real 3-master Redis Cluster: a record and the outbox keys are in different
 * hash slots, so no script completes the one and stages in the other atomically. The
 * outbox is refused, saying what to use instead: `outbox: true` when the store is
 * created, and otherwise `emit()`, which fails the execution before its record completes.
 */
let cluster: RedisClusterHandle;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

type Opened = { store: RedisIdempotencyStore; client: object; close(): Promise<void> };

const CLUSTER_CLIENTS: ReadonlyArray<readonly [string, (options: RedisIdempotencyStoreOptions) => Promise<Opened>]> = [
  [
    'ioredis 6 Cluster',
    async (options) => {
      const client = new Cluster(cluster.nodes, recommendedRedisClusterOptions());
      await once(client, 'ready');
      return { store: new RedisIdempotencyStore(client, options), client, close: async () => void client.disconnect() };
    },
  ],
  [
    'node-redis 6 createCluster',
    async (options) => {
      const client = createCluster({
        rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
        ...recommendedNodeRedisClusterOptions(),
      });
      client.on('error', () => undefined);
      await client.connect();
      return { store: new RedisIdempotencyStore(client, options), client, close: async () => client.destroy() };
    },
  ],
];

describe.each(CLUSTER_CLIENTS)('the outbox with a Redis Cluster client (%s)', (_name, open) => {
  let opened: Opened;
  beforeAll(async () => {
    opened = await open({ prefix: outboxPrefix() });
  });
  afterAll(async () => {
    await opened?.close();
  });

  it('is refused when the store is created with outbox: true, saying what to use instead', () => {
    const create = () => new RedisIdempotencyStore(opened.client as never, { outbox: true });
    expect(create).toThrow(IdempotencyConfigurationError);
    expect(create).toThrow(/RedisIdempotencyStore: the outbox is not available with a Redis Cluster client: .* different hash slots/);
    expect(create).toThrow(/standalone \(or Sentinel\) Redis client, or a TypeORM, Prisma or Drizzle store/);
  });

  it('is off by default: the records work, emit() fails its execution with that error and completes nothing', async () => {
    const { store } = opened;
    expect(store.outboxAvailable).toBe(false);
    let runs = 0;
    const refund = makeIdempotent(
      async (id: string) => {
        runs++;
        return emitTag(id).id;
      },
      { store, key: (id) => id, scope: 'cluster-refund' },
    );
    const refused = await refund('c-1').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IdempotencyConfigurationError);
    expect((refused as IdempotencyConfigurationError).code).toBe(IdempotencyErrorCode.Configuration);
    expect(String((refused as Error).message)).toMatch(
      /IdempotencyOutbox.emit\(EVENTS, 'refund.completed'\) runs on a store without an outbox \(RedisIdempotencyStore: the outbox is not available with a Redis Cluster client/,
    );
    // Nothing completed: the record was released, and a retry runs the handler again.
    await expect(refund('c-1')).rejects.toThrow(IdempotencyConfigurationError);
    expect(runs).toBe(2);
    await expect(store.claimOutbox({ owner: 'me', limit: 1, claimTtl: 1_000 })).rejects.toThrow(
      /RedisIdempotencyStore has no outbox: the outbox is not available with a Redis Cluster client/,
    );
    // The store's records are untouched by the refusal.
    const plain = makeIdempotent(async (id: string) => `done ${id}`, { store, key: (id) => id, scope: 'cluster-plain' });
    expect(await plain('p-1')).toBe('done p-1');
  });
});

describe('an application on a Redis Cluster store', () => {
  let api: INestApplication | undefined;
  let close: (() => Promise<void>) | undefined;
  afterAll(async () => {
    await api?.close();
    await close?.();
  });

  it('boots without a relay, and a handler that emits answers the configuration error', async () => {
    const opened = await CLUSTER_CLIENTS[0]![1]({ prefix: outboxPrefix() });
    close = opened.close;
    // A store with an outbox has its backlog read during app.init(), to start its relay.
    const backlog = jest.spyOn(opened.store, 'outboxBacklog');
    api = await startRefundsApi({ store: opened.store, queue: uniqueName('outbox-cluster') });
    expect(backlog).not.toHaveBeenCalled();
    const res = await request(api.getHttpServer()).post('/refunds/r-1').set('Idempotency-Key', 'k-1').send({ amount: 1 }).expect(500);
    expect(res.body.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
  });
});
