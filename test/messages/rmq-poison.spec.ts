import { Controller, Module, type CanActivate, type ExecutionContext, type INestMicroservice, type LoggerService } from '@nestjs/common';
import {
  ClientProxyFactory,
  MessagePattern,
  Payload,
  RmqRecordBuilder,
  Transport,
  type ClientProxy,
  type RmqContext,
  type RmqOptions,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import type * as amqp from 'amqplib';
import { firstValueFrom } from 'rxjs';
import { Idempotent, IdempotencyModule, isIdempotencyRpcError } from '../../lib/index.js';
import { RefundsModule, RefundsService, declareDeadLetterQueue, refundsTransport, type RefundCommand } from './recipes/rmq-quick-start.js';
import { ChannelObserver, Effects, RABBITMQ_URL, RabbitProbe, startTcpMicroservice, uniqueName, waitFor, type Trace } from './support.js';

/** Every line the application logs, to count how often a misconfiguration is reported. */
class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log = (message: unknown) => this.lines.push(String(message));
  error = (message: unknown) => this.lines.push(String(message));
  warn = (message: unknown) => this.lines.push(String(message));
  debug = () => undefined;
  verbose = () => undefined;
  fatal = (message: unknown) => this.lines.push(String(message));
}

/** Stands in for the quick start's RefundsService: the payment provider is down for good. */
class FailingRefunds {
  readonly attempts = new Effects();
  readonly quotes: string[] = [];
  async refund(command: RefundCommand): Promise<void> {
    this.attempts.hit(command.refundId);
    throw new Error(`payment provider unavailable for ${command.refundId}`);
  }
  async quote(command: RefundCommand) {
    this.quotes.push(command.refundId);
    return { refundId: command.refundId, amount: command.amount };
  }
}

/** Guards run before @Idempotent(): sees each delivery's channel, and every ack and nack made on it. */
class ChannelWatch implements CanActivate {
  readonly trace: Trace = [];
  readonly observer = new ChannelObserver(this.trace);
  readonly channels = new Set<object>();
  readonly closes: string[] = [];

  canActivate(context: ExecutionContext): boolean {
    const channel = context.switchToRpc().getContext<RmqContext>().getChannelRef() as amqp.Channel;
    if (!this.channels.has(channel)) {
      this.channels.add(channel);
      channel.on('close', () => this.closes.push('close'));
      channel.on('error', (error: Error) => this.closes.push(`error: ${error.message}`));
    }
    this.observer.observe(channel);
    return true;
  }
}

/** The quick start of docs/messages.md with a failing RefundsService, on `transport`. */
async function startQuickStart(transport: RmqOptions, refunds: FailingRefunds, logger: LoggerService | false = false) {
  const moduleRef = await Test.createTestingModule({ imports: [RefundsModule] })
    .overrideProvider(RefundsService)
    .useValue(refunds)
    .compile();
  const app = moduleRef.createNestMicroservice<RmqOptions>({ ...transport, logger });
  const watch = new ChannelWatch();
  app.useGlobalGuards(watch);
  await app.listen();
  return { app, watch };
}

function refundRequested(refundId: string): object {
  return { pattern: 'refund.requested', data: { refundId, accountId: 'acc_1', amount: 12 } };
}

describe('RabbitMQ poison messages: maxDeliveries and the dead-letter queue of the quick start', () => {
  let probe: RabbitProbe;
  const apps: INestMicroservice[] = [];
  const queues: string[] = [];
  const exchanges: string[] = [];

  beforeAll(async () => {
    probe = await RabbitProbe.open();
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    const left = await Promise.all(queues.map((queue) => probe.readyCount(queue)));
    await probe.deleteQueues(...queues);
    for (const exchange of exchanges) await probe.channel.deleteExchange(exchange).catch(() => undefined);
    await probe.close();
    // Everything delivered was acked, or moved to a dead-letter queue the tests emptied.
    expect(left).toEqual(queues.map(() => 0));
  });

  async function deadLetters(queue: string): Promise<amqp.GetMessage> {
    await waitFor(`a message in ${queue}.dead`, async () => (await probe.readyCount(`${queue}.dead`)) === 1);
    const dead = await probe.channel.get(`${queue}.dead`, { noAck: true });
    if (!dead) throw new Error(`${queue}.dead emptied under the test`);
    return dead;
  }

  function track(queue: string): void {
    queues.push(queue, `${queue}.dead`);
    exchanges.push(`${queue}.dead-letter`);
  }

  it('classic queue: a refund that always fails runs exactly maxDeliveries (5) times, then waits in the dead-letter queue with its error', async () => {
    const queue = uniqueName('idem-poison-classic');
    track(queue);
    await declareDeadLetterQueue(RABBITMQ_URL, queue);
    const refunds = new FailingRefunds();
    const { app, watch } = await startQuickStart(refundsTransport(RABBITMQ_URL, queue), refunds);
    apps.push(app);

    const refundId = uniqueName('refund');
    probe.channel.sendToQueue(queue, Buffer.from(JSON.stringify(refundRequested(refundId))), {
      messageId: refundId,
      headers: { tenant: 't1' },
    });
    const dead = await deadLetters(queue);
    await waitFor('the original delivery acked', () => watch.observer.count('ack', refundId) === 1);

    // A classic queue only flags redeliveries: the library counted the failures in the store.
    // Each failure went back as basic.reject (a failed delivery to the broker), the last copy was published and the original acked.
    expect(refunds.attempts.count(refundId)).toBe(5);
    const settlements = watch.observer.settlements.filter((s) => s.messageId === refundId);
    expect(settlements.map((s) => `${s.method ?? s.kind}:${s.requeue ?? ''}`)).toEqual([...Array(4).fill('reject:true'), 'ack:']);
    expect(JSON.parse(dead.content.toString())).toEqual(refundRequested(refundId));
    expect(dead.properties.messageId).toBe(refundId);
    expect(dead.properties.headers).toMatchObject({
      tenant: 't1',
      'x-idempotency-error': `Error: payment provider unavailable for ${refundId}`,
      'x-idempotency-deliveries': 5,
      'x-idempotency-handler': 'RefundsConsumer.refund',
      'x-idempotency-queue': queue,
    });
    expect(watch.closes).toEqual([]);

    // Moved back from the dead-letter queue once "fixed", it gets its deliveries afresh.
    probe.channel.sendToQueue(queue, dead.content, { messageId: refundId });
    await deadLetters(queue);
    expect(refunds.attempts.count(refundId)).toBe(10);
  });

  it('quorum queue: the broker counts the deliveries (x-delivery-count), including those the library never saw', async () => {
    const queue = uniqueName('idem-poison-quorum');
    track(queue);
    await declareDeadLetterQueue(RABBITMQ_URL, queue);
    const transport = refundsTransport(RABBITMQ_URL, queue);
    const queueOptions = { ...transport.options!.queueOptions, arguments: { 'x-queue-type': 'quorum' } };
    transport.options!.queueOptions = queueOptions;
    // Two deliveries before this consumer starts, failed by an earlier consumer: only the broker knows of them.
    await probe.channel.assertQueue(queue, queueOptions);
    const refundId = uniqueName('refund');
    probe.channel.sendToQueue(queue, Buffer.from(JSON.stringify(refundRequested(refundId))), { messageId: refundId });
    for (let delivery = 1; delivery <= 2; delivery++) {
      let message: amqp.GetMessage | false = false;
      await waitFor(`delivery ${delivery} to the earlier consumer`, async () =>
        Boolean((message = await probe.channel.get(queue, { noAck: false }))),
      );
      // reject, not nack: a failure, which RabbitMQ 4.3+ counts (it no longer counts a nack).
      probe.channel.reject(message as unknown as amqp.Message, true);
    }

    const refunds = new FailingRefunds();
    const { app, watch } = await startQuickStart(transport, refunds);
    apps.push(app);
    const dead = await deadLetters(queue);
    await waitFor('the original delivery acked', () => watch.observer.count('ack', refundId) === 1);

    // Deliveries 3, 4 and 5 ran here; a count kept by the library would have run 5 more.
    expect(refunds.attempts.count(refundId)).toBe(3);
    expect(dead.properties.headers).toMatchObject({
      'x-idempotency-error': `Error: payment provider unavailable for ${refundId}`,
      'x-idempotency-deliveries': 5,
    });
    // The count belongs to the queue the message left: moved back, it starts again.
    expect(dead.properties.headers).not.toHaveProperty('x-delivery-count');
  });

  it('a dead-letter exchange with no queue bound: says so in an error log, and rejects the message instead of looping', async () => {
    const queue = uniqueName('idem-poison-unbound');
    queues.push(queue);
    exchanges.push(`${queue}.dead-letter`);
    // The exchange of the quick start, without declareDeadLetterQueue's queue: what the issue met.
    await probe.channel.assertExchange(`${queue}.dead-letter`, 'fanout', { durable: true });
    const refunds = new FailingRefunds();
    const logger = new CapturingLogger();
    const { app, watch } = await startQuickStart(refundsTransport(RABBITMQ_URL, queue), refunds, logger);
    apps.push(app);

    const refundId = uniqueName('refund');
    probe.channel.sendToQueue(queue, Buffer.from(JSON.stringify(refundRequested(refundId))), { messageId: refundId });
    await waitFor('the delivery rejected', () => watch.observer.settlements.some((s) => s.messageId === refundId && s.requeue === false));

    expect(refunds.attempts.count(refundId)).toBe(5);
    expect(logger.lines.filter((line) => line.includes(`'${queue}.dead-letter'`) && line.includes('to no queue'))).toHaveLength(1);
    expect(watch.closes).toEqual([]);
  });

  it('a dead-letter exchange that does not exist: one error log, the message rejected, and the consumer channel kept', async () => {
    const queue = uniqueName('idem-poison-noexchange');
    queues.push(queue);
    const refunds = new FailingRefunds();
    const logger = new CapturingLogger();
    const { app, watch } = await startQuickStart(refundsTransport(RABBITMQ_URL, queue), refunds, logger);
    apps.push(app);

    const refundId = uniqueName('refund');
    probe.channel.sendToQueue(queue, Buffer.from(JSON.stringify(refundRequested(refundId))), { messageId: refundId });
    await waitFor('the delivery rejected', () => watch.observer.settlements.some((s) => s.messageId === refundId && s.requeue === false));

    expect(refunds.attempts.count(refundId)).toBe(5);
    expect(logger.lines.filter((line) => line.includes(`exchange '${queue}.dead-letter' does not exist`))).toHaveLength(1);
    // Publishing to a missing exchange would have closed the channel, and Nest does not reopen it: the consumer would be dead.
    expect(watch.closes).toEqual([]);
    const next = uniqueName('refund');
    probe.channel.sendToQueue(queue, Buffer.from(JSON.stringify(refundRequested(next))), { messageId: next });
    await waitFor('the next message rejected too', () =>
      watch.observer.settlements.some((s) => s.messageId === next && s.requeue === false),
    );
  });

  it('auto-ack consumer (noAck: true): refuses with IDEMPOTENCY_CONFIGURATION_ERROR naming noAck: false, logged once, without acking or losing the channel', async () => {
    const queue = uniqueName('idem-poison-autoack');
    track(queue);
    await declareDeadLetterQueue(RABBITMQ_URL, queue);
    const transport = refundsTransport(RABBITMQ_URL, queue);
    transport.options!.noAck = true;
    const refunds = new FailingRefunds();
    const logger = new CapturingLogger();
    const { app, watch } = await startQuickStart(transport, refunds, logger);
    apps.push(app);
    const client: ClientProxy = ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: transport.options!.queueOptions },
    });
    try {
      for (let i = 0; i < 3; i++) {
        const refundId = uniqueName('quote');
        const record = new RmqRecordBuilder({ refundId, accountId: 'acc_1', amount: 3 }).setOptions({ messageId: refundId }).build();
        const error = await firstValueFrom(client.send('refund.quote', record)).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(isIdempotencyRpcError(error)).toBe(true);
        expect(error).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR' });
        // The fix is the server's to read: the caller gets the code, the log the details.
        expect((error as { message: string }).message).not.toMatch(/auto-ack mode/);
        expect(String((error as { hint?: string }).hint ?? '')).not.toMatch(/noAck: false/);
      }
    } finally {
      await client.close();
    }

    expect(refunds.quotes).toEqual([]);
    expect(watch.observer.settlements).toEqual([]);
    // One channel served all three: the broker never closed it for an unknown delivery tag.
    expect(watch.channels.size).toBe(1);
    expect(watch.closes).toEqual([]);
    expect(logger.lines.filter((line) => line.includes('noAck: false') && line.includes('auto-ack mode'))).toHaveLength(1);
  });
});

describe('ack: true on a transport without acknowledgements', () => {
  const effects = new Effects();

  @Controller()
  class TcpQuotes {
    // No key option: TCP messages carry none, so the key is read by the library, which refuses first.
    @MessagePattern('quote.own-ack')
    @Idempotent({ ack: true })
    ownAck(@Payload() data: { id: string }) {
      return effects.hit(`own:${data.id}`);
    }

    /** `ack: true` comes from the module's defaults, meant for the RabbitMQ consumers of a hybrid app. */
    @MessagePattern('quote.module-ack')
    @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id })
    moduleAck(@Payload() data: { id: string }) {
      return effects.hit(`module:${data.id}`);
    }
  }

  // exposeConfigurationErrors: the refusal's details reach the caller, as this test reads them.
  @Module({ imports: [IdempotencyModule.forRoot({ ack: true, exposeConfigurationErrors: true })], controllers: [TcpQuotes] })
  class TcpModule {}

  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  beforeAll(async () => {
    ({ app, client } = await startTcpMicroservice(TcpModule));
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  it('refuses a TCP handler that sets ack: true itself, saying only RabbitMQ acknowledges, and runs one whose ack is the module default', async () => {
    const id = uniqueName('quote');
    const error = await firstValueFrom(client!.send('quote.own-ack', { id })).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR' });
    expect((error as { message: string }).message).toMatch(/only RabbitMQ \(Transport\.RMQ with noAck: false\)/);
    expect(effects.count(`own:${id}`)).toBe(0);

    await expect(firstValueFrom(client!.send('quote.module-ack', { id }))).resolves.toBe(1);
    await expect(firstValueFrom(client!.send('quote.module-ack', { id }))).resolves.toBe(1);
    expect(effects.count(`module:${id}`)).toBe(1);
  });
});
