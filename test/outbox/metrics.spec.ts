import { randomBytes } from 'node:crypto';
import { Controller, Module, Param, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, Transport } from '@nestjs/microservices';
import { Registry } from 'prom-client';
import request from 'supertest';
import {
  Idempotent,
  IdempotencyModule,
  IdempotencyOutbox,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { IDEMPOTENCY_ATTRIBUTES, IDEMPOTENCY_METRICS, createOpenTelemetryListener } from '../../lib/opentelemetry/index.js';
import { createPrometheusListener } from '../../lib/prometheus/index.js';
import { NEST_LOGGER, RabbitProbe, uniqueName, waitFor } from '../messages/support.js';
import { RecordingMeter } from '../observability/recording-meter.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { dropPgOutbox, openPgOutbox } from './pg-app.js';

/**
 * Issue 44, operations: the staged backlog and its oldest age as metrics. The relay reads
 * its store's backlog every `backlogInterval` and reports `outbox_backlog`; the Prometheus
 * listener keeps it as gauges (prom-client's registry, scraped), the OpenTelemetry listener
 * as observable gauges. RabbitMQ is refused through a fault proxy so that a message waits,
 * then let through so that it leaves.
 */

/**
 * An API whose refund handler emits `refund.completed` through the outbox, over RabbitMQ at
 * `rabbitUrl`; `POST /refunds/:id/own-store` does it on a store of its own, `handlerStore`.
 */
async function startApi(
  store: IdempotencyStore,
  rabbitUrl: string,
  queue: string,
  onEvent: (event: IdempotencyEvent) => void,
  handlerStore: IdempotencyStore = new MemoryIdempotencyStore(),
) {
  @Controller('refunds')
  class RefundsController {
    constructor(private readonly outbox: IdempotencyOutbox) {}

    @Post(':id')
    @Idempotent()
    refund(@Param('id') refundId: string): { messageId: string } {
      return { messageId: this.outbox.emit('EVENTS', 'refund.completed', { refundId }) };
    }

    @Post(':id/own-store')
    @Idempotent({ store: handlerStore })
    refundOnOwnStore(@Param('id') refundId: string): { messageId: string } {
      return { messageId: this.outbox.emit('EVENTS', 'refund.completed', { refundId }) };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store,
        logger: false,
        onEvent,
        outbox: { pollInterval: 50, backlogInterval: 100, sendTimeout: 1_000, claimTtl: 2_000, retryDelay: 100, maxRetryDelay: 500 },
      }),
      ClientsModule.register([
        { name: 'EVENTS', transport: Transport.RMQ, options: { urls: [rabbitUrl], queue, queueOptions: { durable: false } } },
      ]),
    ],
    controllers: [RefundsController],
  })
  class ApiModule {}

  const app = await NestFactory.create(ApiModule, { logger: NEST_LOGGER });
  await app.init();
  return app;
}

interface OpenedStore {
  store: IdempotencyStore;
  /** The `store` label of its gauges. */
  label: string;
  dispose(): Promise<void>;
}

const stores: [string, () => Promise<OpenedStore>][] = [
  ['memory', async () => ({ store: new MemoryIdempotencyStore(), label: 'MemoryIdempotencyStore', dispose: async () => undefined })],
  [
    'PostgreSQL (TypeORM)',
    async () => {
      const table = `outbox_metrics_${process.pid}_${randomBytes(4).toString('hex')}`;
      const { dataSource, store } = await openPgOutbox(table);
      return {
        store,
        label: 'TypeOrmIdempotencyStore',
        dispose: async () => {
          await dropPgOutbox(dataSource, table);
          await dataSource.destroy();
        },
      };
    },
  ],
];

describe.each(stores)('the outbox backlog as metrics (%s store, RabbitMQ through a fault proxy)', (_name, open) => {
  const queue = uniqueName('outbox-metrics');
  const registry = new Registry();
  const recording = new RecordingMeter();
  const events: IdempotencyEvent[] = [];
  const prometheus = createPrometheusListener({ registry });
  const openTelemetry = createOpenTelemetryListener({ meter: recording.meter, storeSpans: false, annotateActiveSpan: false });
  let opened: OpenedStore;
  let proxy: FaultProxy;
  let probe: RabbitProbe;
  let api: INestApplication;

  beforeAll(async () => {
    opened = await open();
    probe = await RabbitProbe.open();
    proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
    api = await startApi(opened.store, `amqp://guest:guest@127.0.0.1:${proxy.port}`, queue, (event) => {
      events.push(event);
      prometheus(event);
      openTelemetry(event);
    });
  });
  afterAll(async () => {
    await api?.close();
    await proxy?.stop();
    await probe?.deleteQueues(queue);
    await probe?.close();
    await opened?.dispose();
  });

  /** The Prometheus gauge's sample for this store, undefined while it has none. */
  const gauge = async (name: string): Promise<number | undefined> => {
    const metric = registry.getSingleMetric(`idempotency_${name}`);
    return (await metric?.get())?.values.find((sample) => sample.labels.store === opened.label)?.value;
  };
  /** The OpenTelemetry gauge's observation for this store, at a collection. */
  const observed = async (name: string): Promise<number | undefined> =>
    (await recording.collect(name))?.find((observation) => observation.attributes[IDEMPOTENCY_ATTRIBUTES.store] === opened.label)?.value;
  const sent = (messageId: string) => events.some((event) => event.type === 'outbox_sent' && event.key === messageId);
  const refund = async (id: string): Promise<string> =>
    (await request(api.getHttpServer()).post(`/refunds/${id}`).set('Idempotency-Key', id).expect(201)).body.messageId;

  it('shows a message that waits, pending 1 and an age that grows, and 0 once it was sent', async () => {
    const warm = await refund('m-0');
    await waitFor('m-0 sent', () => sent(warm));

    await proxy.refuse();
    proxy.dropConnections();
    const messageId = await refund('m-1');
    await waitFor('the waiting message counted', async () => (await gauge('outbox_backlog')) === 1);
    const firstAge = (await gauge('outbox_oldest_age_seconds'))!;
    // Later reads of the same waiting message: older each time.
    await waitFor('its age growing', async () => (await gauge('outbox_oldest_age_seconds'))! >= firstAge + 0.3);
    expect(sent(messageId)).toBe(false);
    expect(await observed(IDEMPOTENCY_METRICS.outboxBacklog)).toBe(1);
    expect(await observed(IDEMPOTENCY_METRICS.outboxOldestAge)).toBeGreaterThanOrEqual(firstAge + 0.3);
    expect(recording.instruments.get(IDEMPOTENCY_METRICS.outboxBacklog)).toMatchObject({ unit: '{execution}' });
    expect(recording.instruments.get(IDEMPOTENCY_METRICS.outboxOldestAge)).toMatchObject({ unit: 's' });

    const healedAt = Date.now();
    await proxy.heal();
    await waitFor('m-1 sent', () => sent(messageId), 30_000);
    await waitFor('the backlog back to 0', async () => (await gauge('outbox_backlog')) === 0);
    process.stdout.write(`outbox metrics (${_name}): backlog gauge back to 0 ${Date.now() - healedAt} ms after the broker came back\n`);
    expect(await gauge('outbox_oldest_age_seconds')).toBe(0);
    expect(await observed(IDEMPOTENCY_METRICS.outboxBacklog)).toBe(0);
    expect(await observed(IDEMPOTENCY_METRICS.outboxOldestAge)).toBe(0);

    // A sample, not an occurrence: not counted among the events, but its read is timed.
    const counted = (await registry.getSingleMetric('idempotency_events_total')!.get()).values;
    expect(counted.filter((sample) => sample.labels.event === 'outbox_backlog')).toEqual([]);
    const reads = (await registry.getSingleMetric('idempotency_store_latency_seconds')!.get()).values;
    expect(reads.some((sample) => sample.labels.event === 'outbox_backlog')).toBe(true);
    // An empty backlog is reported only after one with something waiting (so a gauge returns
    // to 0), never while the outbox stays empty: apps that never emit see no such event.
    const backlogs = events.filter((event) => event.type === 'outbox_backlog');
    expect(backlogs[0]).toMatchObject({ pending: expect.any(Number) });
    expect(backlogs[0].pending).toBeGreaterThan(0);
    backlogs.forEach((event, i) => event.pending === 0 && expect(backlogs[i - 1]?.pending).toBeGreaterThan(0));
  }, 60_000);
});

describe('the outbox backlog of a handler store of the same class as the module store', () => {
  const queue = uniqueName('outbox-metrics-stores');
  const registry = new Registry();
  const prometheus = createPrometheusListener({ registry });
  let probe: RabbitProbe;
  let proxy: FaultProxy;
  let api: INestApplication;

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
    api = await startApi(new MemoryIdempotencyStore(), `amqp://guest:guest@127.0.0.1:${proxy.port}`, queue, prometheus);
  });
  afterAll(async () => {
    await api?.close();
    await proxy?.stop();
    await probe?.deleteQueues(queue);
    await probe?.close();
  });

  const samples = async () =>
    new Map(
      (await registry.getSingleMetric('idempotency_outbox_backlog')!.get()).values.map((sample) => [sample.labels.store, sample.value]),
    );

  it('has a series of its own, numbered after the module store', async () => {
    // RabbitMQ refused: a message waits in each store (its relay starts at its first message).
    await proxy.refuse();
    proxy.dropConnections();
    await request(api.getHttpServer()).post('/refunds/s-1').set('Idempotency-Key', 's-1').expect(201);
    await request(api.getHttpServer()).post('/refunds/s-2/own-store').set('Idempotency-Key', 's-2').expect(201);
    await waitFor('both stores reported a waiting message', async () => {
      const now = await samples();
      return now.get('MemoryIdempotencyStore') === 1 && now.get('MemoryIdempotencyStore#2') === 1;
    });
    expect([...(await samples()).keys()].sort()).toEqual(['MemoryIdempotencyStore', 'MemoryIdempotencyStore#2']);
    await proxy.heal();
    await waitFor(
      'both back to 0 once sent',
      async () => {
        const now = await samples();
        return now.get('MemoryIdempotencyStore') === 0 && now.get('MemoryIdempotencyStore#2') === 0;
      },
      30_000,
    );
  }, 60_000);
});
