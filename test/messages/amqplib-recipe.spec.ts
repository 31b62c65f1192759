import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import * as amqp from 'amqplib';
import { IdempotencyModule, MemoryIdempotencyStore } from '../../lib/index.js';
import { consumeRefunds, type RefundCommand } from './recipes/amqplib-refund-consumer.js';
import { RefundsListener } from './recipes/service-run-consumer.js';
import { ChannelObserver, Effects, NEST_LOGGER, RABBITMQ_URL, RabbitProbe, uniqueName, waitFor, type Trace } from './support.js';

const RECIPES = [
  'test/messages/recipes/rmq-quick-start.ts',
  'test/messages/recipes/amqplib-refund-consumer.ts',
  'test/messages/recipes/service-run-consumer.ts',
];

describe('recipe: a plain amqplib consumer wrapped with makeIdempotent (docs/messages.md)', () => {
  const queue = uniqueName('idem-recipe');
  const deadLetterQueue = `${queue}.dead`;
  const store = new MemoryIdempotencyStore();
  const effects = new Effects();
  const attempts = new Effects();
  const failuresLeft = new Map<string, number>();
  const trace: Trace = [];
  const observer = new ChannelObserver(trace);
  let probe: RabbitProbe;
  let consumers: amqp.ChannelModel;
  let first: amqp.Channel;
  let second: amqp.Channel;
  /** Set by a test: the next refund closes the channel it runs on, once. */
  let closeChannelOnce = false;

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    await probe.channel.assertQueue(deadLetterQueue, { durable: false });
    await probe.channel.assertQueue(queue, { durable: false, deadLetterExchange: '', deadLetterRoutingKey: deadLetterQueue });
    consumers = await amqp.connect(RABBITMQ_URL);
    first = await consumers.createChannel();
    second = await consumers.createChannel();
    observer.observe(first);
    observer.observe(second);
    const refund = (channel: amqp.Channel) => async (command: RefundCommand) => {
      attempts.hit(command.refundId);
      if (closeChannelOnce) {
        closeChannelOnce = false;
        // The broker requeues the unacked delivery and redelivers it to the other consumer.
        await channel.close();
      }
      const failures = failuresLeft.get(command.refundId) ?? 0;
      if (failures > 0) {
        failuresLeft.set(command.refundId, failures - 1);
        throw new Error('payment provider unavailable');
      }
      effects.hit(command.refundId);
    };
    await consumeRefunds(first, queue, store, refund(first));
    await consumeRefunds(second, queue, store, refund(second));
  });

  afterAll(async () => {
    await consumers?.close();
    const left = await probe.readyCount(queue);
    await probe.deleteQueues(queue, deadLetterQueue);
    await probe.close();
    expect(left).toBe(0);
  });

  it('runs a refund once for 5 publishes plus a redelivery forced by closing the running consumer channel', async () => {
    const messageId = uniqueName('refund');
    closeChannelOnce = true;
    probe.sendJson(queue, { refundId: messageId, amount: 30 }, { messageId });
    await waitFor('the first delivery to run', () => effects.count(messageId) === 1);
    for (let i = 0; i < 4; i++) probe.sendJson(queue, { refundId: messageId, amount: 30 }, { messageId });
    await waitFor('the redelivery and 4 duplicates acked', () => observer.count('ack', messageId) === 5);
    expect(effects.count(messageId)).toBe(1);
    expect(attempts.count(messageId)).toBe(1);
    // The first delivery's ack failed on its closed channel; every other delivery was acked once.
    expect(trace.filter((t) => t.endsWith(messageId))).toEqual([`ack-failed:${messageId}`, ...Array(5).fill(`ack:${messageId}`)]);
  });

  it('nacks a failure with requeue until it succeeds once, and dead-letters a message without messageId', async () => {
    const messageId = uniqueName('refund');
    failuresLeft.set(messageId, 2);
    probe.sendJson(queue, { refundId: messageId, amount: 4 }, { messageId });
    await waitFor('the third attempt acked', () => observer.count('ack', messageId) === 1);
    expect(attempts.count(messageId)).toBe(3);
    expect(effects.count(messageId)).toBe(1);
    expect(observer.settlements.filter((s) => s.messageId === messageId && s.kind === 'nack').map((s) => s.requeue)).toEqual([true, true]);

    const keyless = uniqueName('keyless');
    probe.sendJson(queue, { refundId: keyless, amount: 1 });
    await waitFor('the keyless message dead-lettered', async () => (await probe.readyCount(deadLetterQueue)) === 1);
    expect(attempts.count(keyless)).toBe(0);
  });
});

describe('recipe: IdempotencyService.run in a Nest-managed amqplib consumer (docs/messages.md)', () => {
  const queue = uniqueName('idem-recipe-run');
  const trace: Trace = [];
  const observer = new ChannelObserver(trace);
  let probe: RabbitProbe;
  let connection: amqp.ChannelModel;
  let app: INestApplicationContext;
  let listener: RefundsListener;

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    await probe.channel.assertQueue(queue, { durable: false });
    @Module({ imports: [IdempotencyModule.forRoot()], providers: [RefundsListener] })
    class ListenerModule {}
    app = await NestFactory.createApplicationContext(ListenerModule, { logger: NEST_LOGGER });
    listener = app.get(RefundsListener);
    connection = await amqp.connect(RABBITMQ_URL);
    const channel = await connection.createChannel();
    observer.observe(channel);
    await listener.listen(channel, queue);
  });

  afterAll(async () => {
    await app?.close();
    await connection?.close();
    const left = await probe.readyCount(queue);
    await probe.deleteQueues(queue);
    await probe.close();
    expect(left).toBe(0);
  });

  it('refunds once for concurrent duplicates and acks each of them', async () => {
    const messageId = uniqueName('refund');
    for (let i = 0; i < 5; i++) probe.sendJson(queue, { refundId: messageId, amount: 6 }, { messageId });
    await waitFor('5 deliveries acked', () => observer.count('ack', messageId) === 5);
    expect(listener.refunded.filter((id) => id === messageId)).toHaveLength(1);
  });

  it('drops a message without messageId instead of requeueing it forever', async () => {
    probe.sendJson(queue, { refundId: uniqueName('keyless'), amount: 1 });
    await waitFor('the keyless message nacked', () => observer.settlements.some((s) => s.kind === 'nack' && s.messageId === undefined));
    expect(observer.settlements.find((s) => s.kind === 'nack')).toMatchObject({ requeue: false });
  });
});

describe('docs/messages.md', () => {
  it.each(RECIPES)('shows %s verbatim (with the package import)', (recipe) => {
    const docs = readFileSync(join(__dirname, '../../docs/messages.md'), 'utf8');
    const marker = `<!-- tested in ${recipe} -->`;
    const start = docs.indexOf(marker);
    expect(start).toBeGreaterThan(-1);
    const block = /```ts[^\n]*\n([\s\S]*?)```/.exec(docs.slice(start))![1];
    const source = readFileSync(join(__dirname, '../..', recipe), 'utf8').replace("'../../../lib/index.js'", "'nestjs-idempotency'");
    expect(block).toBe(source);
  });
});
