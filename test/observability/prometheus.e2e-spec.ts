import type { INestApplication } from '@nestjs/common';
import { Registry } from 'prom-client';
import request from 'supertest';
import { MemoryIdempotencyStore, type IdempotencyEvent } from '../../lib/index.js';
import { createPrometheusListener } from '../../lib/prometheus/index.js';
import { createHttpApp, sleep, type Effects } from '../nest/http-app.js';
import { sampleValue } from './metrics-scrape.js';

const HANDLER = 'PaymentsController.charge';
let seq = 0;
const newKey = () => `prom-${process.pid}-${Date.now()}-${++seq}`;

describe('Prometheus metrics over HTTP', () => {
  let app: INestApplication;
  let effects: Effects;
  const registry = new Registry();
  const events: IdempotencyEvent[] = [];
  const server = () => app.getHttpServer();

  beforeAll(async () => {
    // A list of listeners: the Prometheus one and a recorder, as users combine them.
    ({ app, effects } = await createHttpApp('express', {
      module: { store: new MemoryIdempotencyStore(), onEvent: [createPrometheusListener({ registry }), (e) => events.push(e)] },
      slowMs: 1_000,
    }));
  });
  afterAll(async () => {
    await app?.close();
  });

  async function waitForEvent(type: IdempotencyEvent['type'], count: number): Promise<void> {
    for (let i = 0; i < 500 && events.filter((e) => e.type === type).length < count; i++) await sleep(10);
  }

  it('counts replayed, conflicting and mismatched requests and measures the store', async () => {
    // replayed: the same request twice, one after the other.
    const replayKey = newKey();
    const first = await request(server()).post('/charges').set('Idempotency-Key', replayKey).send({ amount: 1 });
    const replay = await request(server()).post('/charges').set('Idempotency-Key', replayKey).send({ amount: 1 });
    expect(first.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');

    // in_flight_conflict: a duplicate sent once the first has claimed (its handler sleeps 1 s).
    const conflictKey = newKey();
    const running = request(server())
      .post('/charges')
      .set('Idempotency-Key', conflictKey)
      .send({ amount: 2 })
      .then((r) => r);
    await waitForEvent('claimed', 2);
    const conflict = await request(server()).post('/charges').set('Idempotency-Key', conflictKey).send({ amount: 2 });
    expect(conflict.status).toBe(409);
    expect((await running).status).toBe(201);

    // fingerprint_mismatch: the same key with another body.
    const mismatch = await request(server()).post('/charges').set('Idempotency-Key', replayKey).send({ amount: 999 });
    expect(mismatch.status).toBe(422);
    expect(effects.count('charge')).toBe(2);

    const text = await registry.metrics();
    const count = (event: string) => sampleValue(text, 'idempotency_events_total', { event, handler: HANDLER });
    expect(count('claimed')).toBe(2);
    expect(count('completed')).toBe(2);
    expect(count('replayed')).toBe(1);
    expect(count('in_flight_conflict')).toBe(1);
    expect(count('fingerprint_mismatch')).toBe(1);
    expect(count('store_error')).toBeUndefined();
    // Every event that involved a store call is in the latency histogram, in seconds.
    expect(sampleValue(text, 'idempotency_store_latency_seconds_count', { event: 'claimed' })).toBe(2);
    expect(sampleValue(text, 'idempotency_store_latency_seconds_count', { event: 'replayed' })).toBe(1);
    expect(sampleValue(text, 'idempotency_store_latency_seconds_bucket', { event: 'claimed', le: '+Inf' })).toBe(2);
    expect(text).toContain('# TYPE idempotency_store_latency_seconds histogram');
  });

  it('reuses the metrics already registered in a registry instead of throwing', () => {
    const again = createPrometheusListener({ registry });
    again({ type: 'replayed', key: 'k', handler: 'Other.handler', at: Date.now(), durationMs: 1 });
    return registry.metrics().then((text) => {
      expect(sampleValue(text, 'idempotency_events_total', { event: 'replayed', handler: 'Other.handler' })).toBe(1);
    });
  });

  it('honours prefix, buckets in ms and handlerLabel: false', async () => {
    const own = new Registry();
    const listener = createPrometheusListener({
      registry: own,
      prefix: 'payments_idem_',
      storeLatencyBucketsMs: [5, 50],
      handlerLabel: false,
    });
    listener({ type: 'claimed', key: 'k', handler: 'A.b', at: Date.now(), durationMs: 3, storeLatencyMs: 3 });
    listener({ type: 'claimed', key: 'k', handler: 'A.c', at: Date.now(), durationMs: 30, storeLatencyMs: 30 });
    const text = await own.metrics();
    expect(sampleValue(text, 'payments_idem_events_total', { event: 'claimed' })).toBe(2);
    expect(text).not.toMatch(/payments_idem_events_total\{[^}]*handler=/);
    expect(sampleValue(text, 'payments_idem_store_latency_seconds_bucket', { event: 'claimed', le: '0.005' })).toBe(1);
    expect(sampleValue(text, 'payments_idem_store_latency_seconds_bucket', { event: 'claimed', le: '0.05' })).toBe(2);
  });
});
