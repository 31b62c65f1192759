import { randomUUID } from 'node:crypto';
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
import type { OutboxMessage } from '../../lib/core/outbox-store.js';
import { waitFor } from '../messages/support.js';
import { Relays, emitTag, outboxPrefix, tagOf } from './redis-support.js';

/**
 * Issue 44 on a real 3-master Redis Cluster. With a plain prefix a record and the outbox
 * keys are in different hash slots, so no script completes the one and stages in the
 * other atomically: the outbox is refused, saying what to use instead (`outbox: true`
 * when the store is created, otherwise `emit()`, which fails the execution before its
 * record completes). With a prefix that carries a hash tag, every key of the store is in
 * one slot, and the outbox works as on a standalone Redis.
 */
let cluster: RedisClusterHandle;
let inspectorCluster: Cluster;
beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
  inspectorCluster = new Cluster(cluster.nodes);
  await once(inspectorCluster, 'ready');
}, 60_000);
afterAll(async () => {
  inspectorCluster?.disconnect();
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
    expect(create).toThrow(
      /RedisIdempotencyStore: the outbox is not available with a Redis Cluster client and a prefix without a hash tag: .* different hash slots/,
    );
    expect(create).toThrow(/whose prefix has a hash tag, e\.g\. prefix: '\{orders-outbox\}:idem:'/);
    expect(create).toThrow(/a standalone \(or Sentinel\) Redis, or a TypeORM, Prisma or Drizzle store/);
    // An empty tag, or a brace the prefix leaves open, puts each record in a slot of its own.
    for (const prefix of ['idem:{}:', 'idem:{open:', 'idem:}{'])
      expect(() => new RedisIdempotencyStore(opened.client as never, { prefix, outbox: true })).toThrow(/without a hash tag/);
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

describe.each(CLUSTER_CLIENTS)('the outbox on a Redis Cluster with a hash-tagged prefix (%s)', (_name, open) => {
  const relays = new Relays();
  const opened: Opened[] = [];
  afterAll(async () => {
    await relays.stopAll();
    await Promise.all(opened.map((store) => store.close()));
  });

  it('stages with the completion, and two relays send every message once, each execution in order, all keys in one slot', async () => {
    const prefix = `{outbox-${randomUUID()}}:idem:`;
    for (let i = 0; i < 2; i++) opened.push(await open({ prefix }));
    const [first, second] = opened.map((entry) => entry.store);
    expect(first!.outboxAvailable).toBe(true);
    const run = makeIdempotent(
      async (n: number) => {
        for (let line = 0; line < 3; line++) emitTag(`${n}:${line}`);
      },
      { store: first!, key: (n) => String(n), scope: 'tagged' },
    );
    await Promise.all(Array.from({ length: 20 }, (_, n) => run(n)));
    await run(0); // a replay stages nothing
    expect(await first!.outboxBacklog()).toMatchObject({ pending: 20 });
    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const sent: string[][] = [[], []];
    [first!, second!].forEach((store, index) =>
      relays.start(
        store,
        async (message: OutboxMessage) => {
          if (inFlight.has(message.id)) overlaps.push(message.id);
          inFlight.add(message.id);
          await new Promise((resolve) => setTimeout(resolve, 1));
          inFlight.delete(message.id);
          sent[index]!.push(tagOf(message));
        },
        { batchSize: 4 },
      ),
    );
    await waitFor('60 messages', () => sent[0]!.length + sent[1]!.length === 60, 20_000);
    expect(overlaps).toEqual([]);
    expect(new Set(sent.flat()).size).toBe(60);
    for (const tags of sent) {
      for (let n = 0; n < 20; n++) {
        const positions = [0, 1, 2].map((line) => tags.indexOf(`${n}:${line}`)).filter((at) => at >= 0);
        expect(positions).toEqual([...positions].sort((a, b) => a - b));
      }
    }
    await waitFor('the backlog empty', async () => (await first!.outboxBacklog()).pending === 0, 5_000);
    // Every key of the store on one master: 20 records, 20 executions and :sent (:due and :pending emptied).
    const perMaster = await Promise.all(inspectorCluster.nodes('master').map((node) => node.keys(`${prefix}*`)));
    expect(perMaster.filter((keys) => keys.length > 0)).toHaveLength(1);
    expect(perMaster.flat()).toHaveLength(41);
  }, 30_000);
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
