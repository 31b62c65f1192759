import type { INestMicroservice } from '@nestjs/common';
import { ClientProxyFactory, RmqRecordBuilder, Transport, type ClientProxy } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { IdempotencyInFlightError, isIdempotencyRpcError } from '../../lib/index.js';
import { ConsumerEnv, rmqQueueOptions, startRmqConsumer } from './rmq-app.js';
import { RABBITMQ_URL, RabbitProbe, TracingStore, uniqueName, waitFor } from './support.js';

const REFUND = 'RefundsConsumer.refund';
/** The scope of REFUND's keys. */

/** The scope of the refund handler's keys: transport, the queue that received the message, and the pattern. */
const refundOperation = (queue: string) => `rmq queue=${queue} refund.requested`;

describe('RabbitMQ: @EventPattern / @MessagePattern with @Idempotent({ ack: true })', () => {
  const queue = uniqueName('idem-refunds');
  const deadLetterQueue = `${queue}.dead`;
  const env = new ConsumerEnv();
  const store = new TracingStore(env.trace);
  let probe: RabbitProbe;
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    await probe.channel.assertQueue(deadLetterQueue, { durable: false });
    app = await startRmqConsumer({ queue, store, env, deadLetterQueue });
    client = ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: rmqQueueOptions(deadLetterQueue) },
    });
    await client.connect();
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
    // Every delivery was acked or rejected: with the consumer gone, an unacked one would be back in the queue.
    const left = await probe.readyCount(queue);
    await probe.deleteQueues(queue, deadLetterQueue);
    await probe.close();
    expect(left).toBe(0);
  });

  it('acks a delivery only after its result is stored, and a running duplicate only after the first completes', async () => {
    const messageId = uniqueName('refund');
    env.beforeRefund = async (data) => {
      if (data.refundId === messageId) await env.duplicateArrived(refundOperation(queue), messageId);
    };
    const traceStart = env.trace.length;
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 10 }, { messageId });
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 10 }, { messageId });
    await waitFor('both deliveries acked', () => env.observer.count('ack', messageId) === 2);

    expect(env.effects.count(messageId)).toBe(1);
    expect(env.attempts.count(messageId)).toBe(1);
    const trace = env.trace.slice(traceStart);
    expect(trace).toEqual(['stored:' + store.completions, `ack:${messageId}`, `ack:${messageId}`]);
    env.beforeRefund = undefined;
  });

  it('acks a known duplicate at once without running the handler, and never settles a delivery twice', async () => {
    const messageId = uniqueName('refund');
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 3 }, { messageId });
    await waitFor('first delivery acked', () => env.observer.count('ack', messageId) === 1);
    for (let i = 0; i < 4; i++) probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 3 }, { messageId });
    await waitFor('all five deliveries acked', () => env.observer.count('ack', messageId) === 5);

    expect(env.effects.count(messageId)).toBe(1);
    expect(env.attempts.count(messageId)).toBe(1);
    expect(env.events.filter((e) => e.type === 'replayed' && e.handler === REFUND).length).toBeGreaterThanOrEqual(4);
    const deliveries = env.observer.settlements.map((s) => `${s.channel}/${s.deliveryTag}`);
    expect(new Set(deliveries).size).toBe(deliveries.length);
  });

  it('nacks a failing handler with requeue, and runs the redelivery until it succeeds exactly once', async () => {
    const messageId = uniqueName('refund');
    env.failuresLeft.set(messageId, 2);
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 7 }, { messageId });
    await waitFor('the third attempt acked', () => env.observer.count('ack', messageId) === 1);

    expect(env.attempts.count(messageId)).toBe(3);
    expect(env.effects.count(messageId)).toBe(1);
    const nacks = env.observer.settlements.filter((s) => s.messageId === messageId && s.kind === 'nack');
    expect(nacks.map((n) => n.requeue)).toEqual([true, true]);

    // A later duplicate replays: the handler does not run again.
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 7 }, { messageId });
    await waitFor('the duplicate acked', () => env.observer.count('ack', messageId) === 2);
    expect(env.attempts.count(messageId)).toBe(3);
    expect(env.effects.count(messageId)).toBe(1);
  });

  it("settles a delivery once when the handler itself throws one of this library's errors", async () => {
    // E.g. a nested IdempotencyService.run refusing an in-flight key: the interceptor sees
    // the handler fail ('failed') and then its error as a refusal ('rejected'). A second
    // nack of the delivery would make the broker close the channel.
    const messageId = uniqueName('refund');
    env.throwOnce.set(messageId, new IdempotencyInFlightError(1_000));
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 2 }, { messageId });
    await waitFor('the retry acked', () => env.observer.count('ack', messageId) === 1);
    expect(env.observer.count('nack', messageId)).toBe(1);
    expect(env.attempts.count(messageId)).toBe(2);
    expect(env.effects.count(messageId)).toBe(1);
    // The channel is still open: another message goes through.
    const next = uniqueName('refund');
    probe.publish(queue, 'refund.requested', { refundId: next, amount: 2 }, { messageId: next });
    await waitFor('the next message acked', () => env.observer.count('ack', next) === 1);
  });

  it('rejects a message without a key, without requeue, so it dead-letters instead of looping', async () => {
    const refundId = uniqueName('keyless');
    const deadBefore = await probe.readyCount(deadLetterQueue);
    probe.publish(queue, 'refund.requested', { refundId, amount: 1 });
    await waitFor('the keyless message dead-lettered', async () => (await probe.readyCount(deadLetterQueue)) === deadBefore + 1);

    expect(env.attempts.count(refundId)).toBe(0);
    const rejection = env.observer.settlements.find((s) => s.kind === 'nack' && s.messageId === undefined);
    expect(rejection).toMatchObject({ requeue: false });
    const dead = await probe.channel.get(deadLetterQueue, { noAck: true });
    expect(dead && JSON.parse(dead.content.toString()).data.refundId).toBe(refundId);
  });

  it('acks a keyless message of a handler with required: false only after the handler ran', async () => {
    const refundId = uniqueName('audit');
    const traceStart = env.trace.length;
    probe.publish(queue, 'refund.audit', { refundId, amount: 1 });
    await waitFor('the audit acked', () => env.trace.slice(traceStart).includes('ack:-'));
    expect(env.effects.count(`audit:${refundId}`)).toBe(1);
    expect(env.trace.slice(traceStart)).toEqual([`audited:${refundId}`, 'ack:-']);
  });

  it('rejects a key reused with a different payload (fingerprint mismatch) without running it', async () => {
    const messageId = uniqueName('refund');
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 5 }, { messageId });
    await waitFor('first acked', () => env.observer.count('ack', messageId) === 1);
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 500 }, { messageId });
    await waitFor('the altered message rejected', () => env.observer.count('nack', messageId) === 1);

    expect(env.observer.settlements.find((s) => s.kind === 'nack' && s.messageId === messageId)).toMatchObject({ requeue: false });
    expect(env.effects.count(messageId)).toBe(1);
    expect(env.events.some((e) => e.type === 'fingerprint_mismatch' && e.handler === REFUND)).toBe(true);
    await probe.channel.purgeQueue(deadLetterQueue);
  });

  it('answers 20 concurrent requests with one messageId from one execution (@MessagePattern)', async () => {
    const messageId = uniqueName('quote');
    const record = new RmqRecordBuilder({ refundId: messageId, amount: 42 }).setOptions({ messageId }).build();
    const answers = await Promise.all(Array.from({ length: 20 }, () => firstValueFrom(client!.send('refund.quote', record))));

    expect(env.effects.count(`quote:${messageId}`)).toBe(1);
    expect(answers).toHaveLength(20);
    for (const answer of answers) expect(answer).toEqual({ refundId: messageId, amount: 42, quoteNo: 1 });
    await waitFor('all 20 requests acked', () => env.observer.count('ack', messageId) === 20);
  });

  it('sends a request without a key back an RPC error with the stable code, and dead-letters it', async () => {
    const error = await firstValueFrom(client!.send('refund.quote', { refundId: uniqueName('keyless'), amount: 1 })).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isIdempotencyRpcError(error)).toBe(true);
    expect(error).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
    expect((error as { message: string }).message).toMatch(/RabbitMQ message \(its messageId property/);
    expect((error as { hint: string }).hint).toMatch(/Send a unique key/);
    await waitFor('the keyless request dead-lettered', async () => (await probe.readyCount(deadLetterQueue)) === 1);
    await probe.channel.purgeQueue(deadLetterQueue);
  });
});

describe('RabbitMQ: a redelivery while the first delivery still runs', () => {
  const queue = uniqueName('idem-redelivery');
  const env = new ConsumerEnv();
  const store = new TracingStore(env.trace);
  let probe: RabbitProbe;
  const apps: INestMicroservice[] = [];

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    // Two consumers of one queue sharing one store, like two instances of a service.
    apps.push(await startRmqConsumer({ queue, store, env }));
    apps.push(await startRmqConsumer({ queue, store, env }));
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    const left = await probe.readyCount(queue);
    await probe.deleteQueues(queue);
    await probe.close();
    expect(left).toBe(0);
  });

  it('runs the side effect once for 5 publishes of one messageId plus a forced redelivery, and acks every delivery', async () => {
    const messageId = uniqueName('refund');
    let firstDeliveryChannel: unknown;
    env.beforeRefund = async (data, context) => {
      if (firstDeliveryChannel) return;
      // Closing the consumer's channel while the handler runs makes the broker requeue
      // the unacked delivery; the other instance receives it as a redelivery.
      firstDeliveryChannel = context.getChannelRef();
      await context.getChannelRef().close();
      await env.duplicateArrived(refundOperation(queue), data.refundId);
    };
    probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 25 }, { messageId });
    await waitFor('the first handler to finish', () => env.events.some((e) => e.type === 'completed' && e.handler === REFUND));
    for (let i = 0; i < 4; i++) probe.publish(queue, 'refund.requested', { refundId: messageId, amount: 25 }, { messageId });
    // The redelivery and the 4 later publishes, all on the surviving consumer.
    await waitFor('5 deliveries acked on the surviving channel', () => env.observer.count('ack', messageId) === 5);

    expect(env.effects.count(messageId)).toBe(1);
    expect(env.attempts.count(messageId)).toBe(1);
    expect(store.completions).toBe(1);
    // The first delivery's ack was attempted after the store write and failed on the
    // closed channel (the broker had requeued it already); the redelivery was acked.
    expect(env.trace).toEqual(['stored:1', `ack-failed:${messageId}`, ...Array(5).fill(`ack:${messageId}`)]);
    expect(env.events.filter((e) => e.type === 'replayed' && e.handler === REFUND)).toHaveLength(5);
  });
});
