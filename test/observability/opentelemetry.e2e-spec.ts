import type { INestApplication } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SpanStatusCode, context, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import request from 'supertest';
import { Redis } from 'ioredis';
import { createServer } from 'node:net';
import { MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { IDEMPOTENCY_ATTRIBUTES, createOpenTelemetryListener } from '../../lib/opentelemetry/index.js';
import { createHttpApp } from '../nest/http-app.js';
import { AsyncLocalStorageContextManager } from './async-context-manager.js';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = provider.getTracer('test');
const contextManager = new AsyncLocalStorageContextManager();

/**
 * Stands in for the HTTP auto-instrumentation: one active server span per request, open
 * from the request's arrival until its response is sent (outside every interceptor, as
 * the instrumentation of Node's http server is).
 */
function requestSpanMiddleware(req: IncomingMessage, res: ServerResponse, next: () => void): void {
  const span = tracer.startSpan(`POST ${req.url}`);
  res.on('finish', () => span.end());
  context.with(trace.setSpan(context.active(), span), next);
}

/** A port nobody listens on: bound by us a moment ago, then closed. */
function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

let seq = 0;
const newKey = () => `otel-${process.pid}-${Date.now()}-${++seq}`;
const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);

describe('OpenTelemetry spans and attributes', () => {
  let app: INestApplication;

  beforeAll(async () => {
    context.setGlobalContextManager(contextManager);
    ({ app } = await createHttpApp('fastify', {
      module: { store: new MemoryIdempotencyStore(), onEvent: createOpenTelemetryListener({ tracer }) },
      configure: (application) => application.use(requestSpanMiddleware),
      slowMs: 1,
    }));
  });
  afterAll(async () => {
    await app?.close();
    await provider.shutdown();
    context.disable();
  });
  beforeEach(() => exporter.reset());

  it('annotates the request span and records store spans for an execution and its replay', async () => {
    const key = newKey();
    const first = await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 });
    const replay = await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 });
    expect(first.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');

    const [executed, replayed] = spansNamed('POST /charges');
    expect(executed.attributes).toMatchObject({
      [IDEMPOTENCY_ATTRIBUTES.outcome]: 'completed',
      [IDEMPOTENCY_ATTRIBUTES.handler]: 'PaymentsController.charge',
      [IDEMPOTENCY_ATTRIBUTES.replayed]: false,
    });
    expect(replayed.attributes).toMatchObject({ [IDEMPOTENCY_ATTRIBUTES.outcome]: 'replayed', [IDEMPOTENCY_ATTRIBUTES.replayed]: true });
    const keyHash = executed.attributes[IDEMPOTENCY_ATTRIBUTES.keyHash];
    expect(keyHash).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(replayed.attributes[IDEMPOTENCY_ATTRIBUTES.keyHash]).toBe(keyHash);
    expect(executed.events.map((e) => e.name)).toEqual(['idempotency.claimed', 'idempotency.completed']);
    expect(replayed.events.map((e) => e.name)).toEqual(['idempotency.replayed']);
    // The raw client key never reaches the trace.
    expect(JSON.stringify(exporter.getFinishedSpans().map((s) => [s.attributes, s.events]))).not.toContain(key);

    // One store span per store call, children of the request span.
    const childOf = (span: ReadableSpan, parent: ReadableSpan) => span.parentSpanContext?.spanId === parent.spanContext().spanId;
    const [claimed] = spansNamed('idempotency claimed');
    const [completed] = spansNamed('idempotency completed');
    const [replayedStore] = spansNamed('idempotency replayed');
    expect(childOf(claimed, executed)).toBe(true);
    expect(childOf(completed, executed)).toBe(true);
    expect(childOf(replayedStore, replayed)).toBe(true);
    expect(claimed.attributes).toMatchObject({ [IDEMPOTENCY_ATTRIBUTES.event]: 'claimed', [IDEMPOTENCY_ATTRIBUTES.keyHash]: keyHash });
    expect(typeof claimed.attributes[IDEMPOTENCY_ATTRIBUTES.storeLatencyMs]).toBe('number');
  });

  it('marks a failing store call as an error span, with the fail-open flag', async () => {
    // A Redis store whose server is not running, with the client settings docs/redis.md
    // recommends (no offline queue): every command fails at once.
    const client = new Redis({
      host: '127.0.0.1',
      port: await closedPort(),
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    const refused = new RedisIdempotencyStore(client);
    const charge = makeIdempotent(async (amount: number) => ({ amount }), {
      store: refused,
      key: () => 'k',
      scope: 'otel-test',
      onStoreError: 'fail-open',
      onEvent: createOpenTelemetryListener({ tracer }),
    });
    await tracer.startActiveSpan('job', async (job) => {
      await charge(5);
      job.end();
    });
    const [storeSpan] = spansNamed('idempotency store_error');
    if (client.status !== 'end') client.disconnect();
    expect(storeSpan.status.code).toBe(SpanStatusCode.ERROR);
    expect(storeSpan.status.message).toBeTruthy();
    expect(storeSpan.attributes[IDEMPOTENCY_ATTRIBUTES.failOpen]).toBe(true);
    expect(storeSpan.events.map((e) => e.name)).toContain('exception');
    const [job] = spansNamed('job');
    expect(job.attributes[IDEMPOTENCY_ATTRIBUTES.outcome]).toBe('store_error');
  });

  it('records nothing on the active span when annotateActiveSpan is false, and no store spans when storeSpans is false', async () => {
    const quiet = makeIdempotent(async () => 1, {
      store: new MemoryIdempotencyStore(),
      key: () => 'k',
      scope: 'otel-quiet',
      onEvent: createOpenTelemetryListener({ tracer, annotateActiveSpan: false, storeSpans: false }),
    });
    await tracer.startActiveSpan('quiet-job', async (job) => {
      await quiet();
      job.end();
    });
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(['quiet-job']);
    expect(spansNamed('quiet-job')[0].attributes).toEqual({});
  });
});
