import type { INestApplication } from '@nestjs/common';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { DataSource } from 'typeorm';
import request from 'supertest';
import * as amqp from 'amqplib';
import { Redis } from 'ioredis';
import { createSampleApp } from '../src/app.js';
import { configFromEnv, type SampleAppConfig } from '../src/config.js';
import { OrderEventsPublisher } from '../src/messages/order-events.publisher.js';
import { Mailer } from '../src/refunds/external-services.js';

// The sample app on its embedded defaults (memory store + in-memory SQLite) and on the
// real stores (Redis 127.0.0.1:6379 + PostgreSQL 127.0.0.1:5432/test, in a schema of its own).
const run = randomUUID().replace(/-/g, '').slice(0, 12);
const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const AMQP_URL = process.env.TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

const configs: Array<[string, SampleAppConfig]> = [
  ['embedded (memory store + sql.js)', { ...configFromEnv({}), port: 0 }],
  [
    'real stores (Redis + PostgreSQL + RabbitMQ)',
    {
      ...configFromEnv({}),
      port: 0,
      redisUrl: REDIS_URL,
      redisPrefix: `sample-app-e2e:${run}:`,
      databaseUrl: POSTGRES_URL,
      databaseSchema: `sample_app_${run}`,
      amqpUrl: AMQP_URL,
      amqpQueue: `sample-app-e2e-${run}`,
    },
  ],
];

/** Polls `probe` until `done` holds on its value; fails, naming `what` and the last value, at the deadline. */
async function until<T>(what: string, probe: () => Promise<T>, done: (value: T) => boolean, deadlineMs = 30_000): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}; last seen: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const execFileAsync = promisify(execFile);

/**
 * Messages of one queue that are ready and that a consumer holds unacknowledged. AMQP
 * itself reports only the ready ones (queue.declare-ok), and a message taken but not yet
 * acked is exactly one whose effect may still be running, so the broker is asked with
 * rabbitmqctl (on the PATH where RabbitMQ runs, as root or the rabbitmq user).
 */
async function queueDepth(queue: string): Promise<{ ready: number; unacked: number }> {
  let stdout: string;
  try {
    ({ stdout } = await execFileAsync(
      'rabbitmqctl',
      ['list_queues', '--quiet', '--no-table-headers', 'name', 'messages_ready', 'messages_unacknowledged'],
      { timeout: 30_000 },
    ));
  } catch (error) {
    throw new Error(`cannot count the messages of ${queue} with rabbitmqctl (it must run on this machine, as root): ${(error as Error).message}`, {
      cause: error,
    });
  }
  for (const line of stdout.split('\n')) {
    const [name, ready, unacked] = line.trim().split(/\s+/);
    if (name === queue) return { ready: Number(ready), unacked: Number(unacked) };
  }
  throw new Error(`rabbitmqctl does not list the queue ${queue}:\n${stdout}`);
}

/** Waits until every message of the queue has been delivered and acknowledged, i.e. its effect is committed. */
async function waitForDrainedQueue(queue: string): Promise<void> {
  await until(`queue ${queue} to be drained (nothing ready, nothing unacked)`, () => queueDepth(queue), (d) => d.ready === 0 && d.unacked === 0);
}

describe.each(configs)('sample app on %s', (_name, config) => {
  let app: INestApplication;
  let http: ReturnType<INestApplication['getHttpServer']>;

  beforeAll(async () => {
    app = await createSampleApp({ ...config, demoHooks: true }, { logger: false });
    if (config.amqpUrl) await app.startAllMicroservices();
    await app.init();
    http = app.getHttpServer();
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    if (config.amqpUrl) {
      const connection = await amqp.connect(config.amqpUrl);
      const channel = await connection.createChannel();
      await channel.deleteQueue(config.amqpQueue);
      await connection.close();
    }
    if (config.redisUrl) {
      // Records, tokens and locks of this run only (they would expire by themselves in 24 h).
      const redis = new Redis(config.redisUrl);
      const keys = await redis.keys(`${config.redisPrefix}*`);
      if (keys.length) await redis.del(...keys);
      await redis.quit();
    }
    if (config.databaseUrl && config.databaseSchema) {
      const admin = new DataSource({ type: 'postgres', url: config.databaseUrl });
      await admin.initialize();
      await admin.query(`DROP SCHEMA IF EXISTS "${config.databaseSchema}" CASCADE`);
      await admin.destroy();
    }
  }, 60_000);

  const stats = async () => (await request(http).get('/stats').expect(200)).body;
  const refund = (key: string | undefined, amount: number, extra: Record<string, string> = {}) => {
    const req = request(http).post('/webhooks/refunds').set(extra);
    if (key !== undefined) req.set('Idempotency-Key', key);
    return req.send({ accountId: 'acct_1', amount });
  };

  it('refunds once per key: retries replay with Idempotent-Replayed, another payload is 422, no key is 400', async () => {
    const key = `evt_${randomUUID()}`;
    const before = await stats();
    const first = await refund(key, 250).expect(200);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const retry = await refund(key, 250).expect(200);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toEqual(first.body);

    const mismatch = await refund(key, 251).expect(422);
    expect(mismatch.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
    const missing = await refund(undefined, 250).expect(400);
    expect(missing.body.code).toBe('IDEMPOTENCY_KEY_MISSING');

    // X-Idempotency-Key names the same key.
    const alternate = await request(http).post('/webhooks/refunds').set('X-Idempotency-Key', key).send({ accountId: 'acct_1', amount: 250 }).expect(200);
    expect(alternate.headers['idempotent-replayed']).toBe('true');

    const after = await stats();
    expect(after.refunds.count - before.refunds.count).toBe(1);
    expect(before.balance - after.balance).toBe(250);
  });

  it('runs one refund for concurrent duplicates; the others get 409 with Retry-After, then the replay', async () => {
    const key = `evt_${randomUUID()}`;
    const before = await stats();
    const answers = await Promise.all(Array.from({ length: 8 }, () => refund(key, 300, { 'X-Demo-Delay-Ms': '300' })));
    // Each duplicate is either refused while the first runs, or (if it arrived late) a replay of it.
    for (const answer of answers) expect([200, 409]).toContain(answer.status);
    const successes = answers.filter((a) => a.status === 200);
    expect(successes.filter((a) => a.headers['idempotent-replayed'] !== 'true')).toHaveLength(1);
    for (const success of successes) expect(success.body).toEqual(successes[0].body);
    for (const conflict of answers.filter((a) => a.status === 409)) {
      expect(conflict.body.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');
      expect(Number(conflict.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    }
    const replay = await refund(key, 300).expect(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    const after = await stats();
    expect(after.refunds.count - before.refunds.count).toBe(1);
    expect(before.balance - after.balance).toBe(300);
  });

  const refundRequest = (key: string, body: Record<string, unknown>) => request(http).post('/refunds').set('Idempotency-Key', key).send(body);
  const countOf = (list: string[], reference: string) => list.filter((r) => r === reference).length;

  it('POST /refunds: refunds at the provider, writes the ledger and e-mails once per key; a retry replays, another body is 422', async () => {
    const key = `refund_${randomUUID()}`;
    const body = { accountId: 'acct_1', amount: 420, email: 'ada@example.com' };
    const before = await stats();
    const first = await refundRequest(key, body).expect(200);
    expect(first.body).toMatchObject({ reference: key, accountId: 'acct_1', amount: 420, providerRefundId: expect.stringMatching(/^re_/), emailId: expect.stringMatching(/^em_/) });
    const retry = await refundRequest(key, body).expect(200);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toEqual(first.body);
    expect((await refundRequest(key, { ...body, amount: 421 }).expect(422)).body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
    // An unknown account is refused before anything reaches the provider.
    await refundRequest(`refund_${randomUUID()}`, { ...body, accountId: 'acct_nobody' }).expect(404);

    const after = await stats();
    expect(countOf(after.external.paymentProvider.refunds, key)).toBe(1);
    expect(after.external.paymentProvider.calls - before.external.paymentProvider.calls).toBe(1);
    expect(countOf(after.external.mailer.emails, key)).toBe(1);
    expect(after.refunds.count - before.refunds.count).toBe(1);
    expect(before.balance - after.balance).toBe(420);
  });

  it('POST /refunds: after the e-mail step fails, the retry sends the e-mail without refunding again', async () => {
    const key = `refund_${randomUUID()}`;
    const body = { accountId: 'acct_1', amount: 330, email: 'grace@example.com' };
    const before = await stats();
    app.get(Mailer).failNext = 1;
    await refundRequest(key, body).expect(500); // the mailer is down: the key is released
    const failed = await stats();
    expect(countOf(failed.external.paymentProvider.refunds, key)).toBe(1);
    expect(countOf(failed.external.mailer.emails, key)).toBe(0);

    const resumed = await refundRequest(key, body).expect(200);
    expect(resumed.headers['idempotent-replayed']).toBeUndefined();
    const after = await stats();
    // Steps 1 and 2 came from their records: one provider call, one ledger row, one debit.
    expect(after.external.paymentProvider.calls - before.external.paymentProvider.calls).toBe(1);
    expect(countOf(after.external.paymentProvider.refunds, key)).toBe(1);
    expect(countOf(after.external.mailer.emails, key)).toBe(1);
    expect(after.refunds.count - before.refunds.count).toBe(1);
    expect(before.balance - after.balance).toBe(330);
  });

  it('walks an order through its state machine and ships it once however often order.paid is redelivered', async () => {
    const before = await stats();
    const key = `order_${randomUUID()}`;
    const created = await request(http).post('/orders').set('Idempotency-Key', key).send({ sku: 'sku_tee', quantity: 3 }).expect(201);
    const again = await request(http).post('/orders').set('Idempotency-Key', key).send({ sku: 'sku_tee', quantity: 3 }).expect(201);
    expect(again.body.id).toBe(created.body.id);
    const id = created.body.id as number;

    const pays = await Promise.all([0, 1, 2].map(() => request(http).post(`/orders/${id}/transitions`).send({ to: 'paid' })));
    expect(pays.map((p) => p.status)).toEqual([201, 201, 201]);
    const message = { id: `order.paid:${id}`, type: 'order.paid', orderId: id };
    const deliveries = await Promise.all(Array.from({ length: 6 }, () => request(http).post('/messages').send(message)));
    expect(deliveries.map((d) => d.status)).toEqual(Array(6).fill(200));
    expect(new Set(deliveries.map((d) => d.body.shipmentId)).size).toBe(1);

    const orderStatus = async () => (await request(http).get(`/orders/${id}`).expect(200)).body.status as string;
    await until(`order ${id} to ship`, orderStatus, (status) => status === 'shipped');
    // Every delivery of order.paid the app published itself must be over before counting,
    // or a second shipment still on its way would go unseen.
    await app.get(OrderEventsPublisher).drain();
    if (config.amqpUrl) await waitForDrainedQueue(config.amqpQueue);
    const after = await stats();
    expect(after.orders - before.orders).toBe(1);
    expect(after.shipments.count - before.shipments.count).toBe(1);
    expect(before.inventory.sku_tee.stock - after.inventory.sku_tee.stock).toBe(3);

    const illegal = await request(http).post(`/orders/${id}/transitions`).send({ to: 'cancelled' }).expect(409);
    expect(illegal.body.code).toBe('IDEMPOTENCY_ILLEGAL_TRANSITION');
  });

  it('refuses a stale stock edit with 409 (optimistic locking) and replays a retried one', async () => {
    const item = (await request(http).get('/inventory/sku_cap').expect(200)).body;
    const key = randomUUID();
    const edit = { delta: 4, expectedVersion: item.version };
    const first = await request(http).patch('/inventory/sku_cap').set('Idempotency-Key', key).send(edit).expect(200);
    expect(first.body).toEqual({ sku: 'sku_cap', stock: item.stock + 4, version: item.version + 1 });
    const retried = await request(http).patch('/inventory/sku_cap').set('Idempotency-Key', key).send(edit).expect(200);
    expect(retried.headers['idempotent-replayed']).toBe('true');
    const stale = await request(http).patch('/inventory/sku_cap').set('Idempotency-Key', randomUUID()).send(edit).expect(409);
    expect(stale.body.code).toBe('IDEMPOTENCY_OPTIMISTIC_LOCK');
    expect((await request(http).get('/inventory/sku_cap').expect(200)).body.stock).toBe(item.stock + 4);
  });

  it('accepts each checkout token once, however many submissions race', async () => {
    const cartId = `cart_${randomUUID()}`;
    const { token } = (await request(http).post('/checkout/tokens').send({ cartId }).expect(201)).body;
    const before = await stats();
    const submit = () => request(http).post('/checkout').set('Checkout-Token', token).send({ cartId, total: 4200 });
    const answers = await Promise.all([submit(), submit(), submit(), submit()]);
    expect(answers.map((a) => a.status).sort()).toEqual([201, 409, 409, 409]);
    for (const refused of answers.filter((a) => a.status === 409)) expect(refused.body.code).toBe('IDEMPOTENCY_TOKEN_USED');
    expect((await stats()).checkouts - before.checkouts).toBe(1);

    // A token issued for another cart is unknown here, and a request without one is refused.
    const other = (await request(http).post('/checkout/tokens').send({ cartId: 'cart_other' }).expect(201)).body.token;
    expect((await request(http).post('/checkout').set('Checkout-Token', other).send({ cartId, total: 1 }).expect(422)).body.code).toBe('IDEMPOTENCY_TOKEN_INVALID');
    expect((await request(http).post('/checkout').send({ cartId, total: 1 }).expect(400)).body.code).toBe('IDEMPOTENCY_TOKEN_MISSING');
  });

  it('runs the settlement of a day once under a lock, and replays it to later runs', async () => {
    const day = '2026-11-28'; // every configuration has a database of its own
    const before = await stats();
    const runs = await Promise.all(Array.from({ length: 5 }, () => request(http).post('/settlements/run').send({ day })));
    expect(runs.map((r) => r.status)).toEqual(Array(5).fill(200));
    expect(runs.filter((r) => r.body.replayed === false)).toHaveLength(1);
    expect(new Set(runs.map((r) => r.body.refundsTotal)).size).toBe(1);
    const later = await request(http).post('/settlements/run').send({ day }).expect(200);
    expect(later.body.replayed).toBe(true);
    expect((await stats()).settlements - before.settlements).toBe(1);
  });

  if (config.amqpUrl) {
    it('ships once when RabbitMQ redelivers order.paid (same messageId, acked only after the store)', async () => {
      const before = (await request(http).get('/stats').expect(200)).body;
      const created = await request(http).post('/orders').set('Idempotency-Key', randomUUID()).send({ sku: 'sku_cap', quantity: 2 }).expect(201);
      const id = created.body.id as number;
      await request(http).post(`/orders/${id}/transitions`).send({ to: 'paid' }).expect(201); // publishes order.paid once
      // The broker (or a retrying publisher) delivers the same message four more times.
      const connection = await amqp.connect(config.amqpUrl!);
      const channel = await connection.createConfirmChannel();
      const message = { pattern: 'order.paid', data: { id: `order.paid:${id}`, type: 'order.paid', orderId: id } };
      for (let i = 0; i < 4; i++) channel.sendToQueue(config.amqpQueue, Buffer.from(JSON.stringify(message)), { messageId: `order.paid:${id}`, persistent: true });
      await channel.waitForConfirms();
      await connection.close();

      // The consumer acks a delivery only once its outcome is stored: when no copy is ready
      // or unacked any more, every delivery's effect (or refusal) is committed.
      await waitForDrainedQueue(config.amqpQueue);
      await until(
        `order ${id} to ship`,
        async () => (await request(http).get(`/orders/${id}`).expect(200)).body.status as string,
        (status) => status === 'shipped',
      );
      const stats = (await request(http).get('/stats').expect(200)).body;
      expect(stats.shipments.keys.filter((key: string) => key === `order.paid:${id}`)).toHaveLength(1);
      expect((await request(http).get(`/orders/${id}`).expect(200)).body.status).toBe('shipped');
      expect(before.inventory.sku_cap.stock - stats.inventory.sku_cap.stock).toBe(2);
    });
  }
});
