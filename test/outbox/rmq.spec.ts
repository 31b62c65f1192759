import type { INestApplication, INestMicroservice } from '@nestjs/common';
import request from 'supertest';
import { MemoryIdempotencyStore, type IdempotencyEvent } from '../../lib/index.js';
import { RabbitProbe, uniqueName, waitFor } from '../messages/support.js';
import { captureLogger } from '../support/capture-logger.js';
import { ConsumerLog, startRefundsApi, startRefundsConsumer } from './apps.js';

/**
 * Issue 44 end to end on a real RabbitMQ: HTTP request with a key -> handler -> outbox ->
 * RabbitMQ -> an @Idempotent() consumer that applies it once. The message carries its
 * outbox id as the AMQP messageId; a replay and a failed handler send nothing.
 */
describe('the outbox over RabbitMQ (memory store)', () => {
  const queue = uniqueName('outbox-refunds');
  const log = new ConsumerLog();
  const logged: string[] = [];
  const events: IdempotencyEvent[] = [];
  let api: INestApplication;
  let consumer: INestMicroservice;
  let probe: RabbitProbe;

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
    api = await startRefundsApi({
      store: new MemoryIdempotencyStore(),
      queue,
      logger: captureLogger(logged),
      onEvent: (event) => events.push(event),
    });
  });

  afterAll(async () => {
    await api?.close();
    await consumer?.close();
    await probe.deleteQueues(queue);
    await probe.close();
  });

  const refund = (key: string, id: string, body: Record<string, unknown> = {}) =>
    request(api.getHttpServer())
      .post(`/refunds/${id}`)
      .set('Idempotency-Key', key)
      .send({ amount: 10, ...body });

  it('sends the message after the request completed, with its outbox id as messageId, applied once', async () => {
    const res = await refund('k-1', 'r-1').expect(201);
    const [messageId] = res.body.messageIds as string[];
    expect(messageId).toMatch(/^msg_/);
    await waitFor('r-1 applied', () => log.effects.count('r-1') === 1);
    expect(log.messageIds).toContain(messageId);
    // Reported to onEvent (and so to the Prometheus and OpenTelemetry listeners): the id, the client, the time since staging.
    await waitFor('outbox_sent reported', () => events.some((event) => event.type === 'outbox_sent' && event.key === messageId));
    expect(events.find((event) => event.type === 'outbox_sent' && event.key === messageId)).toMatchObject({ handler: 'EVENTS' });
  });

  it('sends nothing for a replay, nor for a handler that throws', async () => {
    await refund('k-2', 'r-2').expect(201);
    const replay = await refund('k-2', 'r-2').expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    await refund('k-3', 'r-3', { fail: true }).expect(402);
    // Messages leave in staging order: once the next request's has arrived, the others would have.
    await refund('k-4', 'r-4').expect(201);
    await waitFor('r-4 applied', () => log.effects.count('r-4') === 1);
    expect(log.deliveries.count('r-2')).toBe(1);
    expect(log.deliveries.count('r-3')).toBe(0);
  });

  it('keeps the order of one execution, and a re-sent message (same id) is applied once by the consumer', async () => {
    const res = await refund('k-5', 'r-5', { lines: 3 }).expect(201);
    await waitFor('three lines applied', () => log.effects.count('r-5#2') === 1);
    expect(log.order.filter((id) => id.startsWith('r-5'))).toEqual(['r-5', 'r-5#1', 'r-5#2']);
    // What a relay does after a crash between the broker's confirmation and the store's settlement.
    const [first] = res.body.messageIds as string[];
    probe.publish(queue, 'refund.completed', { refundId: 'r-5', amount: 10 }, { messageId: first });
    await waitFor('the re-sent copy delivered', () => log.deliveries.count('r-5') === 2);
    expect(log.effects.count('r-5')).toBe(1);
  });

  it('refuses an emit outside an execution and one to an unknown client, saying why', async () => {
    await request(api.getHttpServer()).post('/refunds/r-6/unprotected').expect(500);
    const misrouted = await request(api.getHttpServer()).post('/refunds/r-8/misrouted').set('Idempotency-Key', 'k-8').expect(500);
    expect(misrouted.body.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
    expect(logged.join('\n')).toMatch(/no ClientProxy is registered as NO_SUCH_CLIENT/);
    await refund('k-9', 'r-9').expect(201);
    await waitFor('r-9 applied', () => log.effects.count('r-9') === 1);
    expect(log.deliveries.count('r-6')).toBe(0);
    expect(log.deliveries.count('r-8')).toBe(0);
  });

  it('with the module switched off (IdempotencyTestingModule), sends at once as the handler would', async () => {
    const off = await startRefundsApi({ store: new MemoryIdempotencyStore(), queue, enabled: false });
    try {
      const res = await request(off.getHttpServer()).post('/refunds/r-10').send({ amount: 5 }).expect(201);
      await waitFor('r-10 applied', () => log.effects.count('r-10') === 1);
      expect(log.messageIds).toContain(res.body.messageIds[0]);
    } finally {
      await off.close();
    }
  });
});
