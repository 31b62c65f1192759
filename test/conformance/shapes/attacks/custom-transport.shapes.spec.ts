import { Controller, Module, type ExecutionContext, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BaseRpcContext, Ctx, EventPattern, Payload, Server, type CustomTransportStrategy } from '@nestjs/microservices';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';

/**
 * A shape found by attack: a custom transport strategy (SQS, Pub/Sub, Azure Service Bus:
 * the usual way to bring a broker Nest does not ship) consuming two queues with one
 * handler. When neither strategy names what it consumes, the library cannot tell the two
 * consumers apart: it refuses the message (never runs it under a shared record); when
 * each names its queue as `options.queue`, each queue runs its copy once.
 */
class SqsContext extends BaseRpcContext<[string, string]> {
  getQueueUrl() {
    return this.args[0];
  }
  getMessageId() {
    return this.args[1];
  }
}

class SqsServer extends Server implements CustomTransportStrategy {
  readonly options: { queue?: string };
  constructor(
    readonly queueUrl: string,
    queue?: string,
  ) {
    super();
    this.options = { queue };
  }
  listen(callback: () => void) {
    callback();
  }
  close() {}
  on() {
    return undefined as never;
  }
  unwrap<T>(): T {
    return undefined as T;
  }
  /** What the SQS poller would do with one received message. */
  deliver(pattern: string, data: unknown, messageId: string) {
    return this.handleEvent(pattern, { pattern, data }, new SqsContext([this.queueUrl, messageId]));
  }
}

const seen: string[] = [];
const messageId = (ctx: ExecutionContext) => ctx.switchToRpc().getContext<SqsContext>().getMessageId();

@Controller()
class OrdersConsumer {
  @EventPattern<string>('custom.order.placed')
  @Idempotent({ key: messageId })
  placed(@Payload() data: { orderId: string }, @Ctx() ctx: SqsContext): void {
    seen.push(`${ctx.getQueueUrl()} ${data.orderId}`);
  }
}

@Controller()
class NamedOrdersConsumer {
  @EventPattern<string>('custom.named.order.placed')
  @Idempotent({ key: messageId })
  placed(@Payload() data: { orderId: string }, @Ctx() ctx: SqsContext): void {
    seen.push(`${ctx.getQueueUrl()} ${data.orderId}`);
  }
}

/** What the library logged as errors: an event's refusal has no caller to answer, so it is logged. */
const errors: string[] = [];
const logger = { log() {}, warn() {}, error: (message: unknown) => void errors.push(String(message)) };

async function bootWith(controller: Function, ...servers: SqsServer[]): Promise<INestApplication> {
  @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger })], controllers: [controller as never] })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  for (const strategy of servers) app.connectMicroservice({ strategy });
  await app.startAllMicroservices();
  await app.init();
  return app;
}

describe('shape: one handler on two queues of a custom transport strategy', () => {
  const apps: INestApplication[] = [];
  afterAll(async () => {
    for (const app of apps) await app.close();
  });

  it('without a queue name on either strategy, a message is refused with a configuration error, never run under a shared record', async () => {
    const eu = new SqsServer('https://sqs.eu-west-1.amazonaws.com/1/orders');
    const us = new SqsServer('https://sqs.us-east-1.amazonaws.com/1/orders');
    apps.push(await bootWith(OrdersConsumer, eu, us));
    await eu.deliver('custom.order.placed', { orderId: 'o-1' }, 'm-1');
    expect(errors.some((line) => line.includes('IDEMPOTENCY_CONFIGURATION_ERROR') && line.includes("'custom.order.placed'"))).toBe(true);
    expect(seen.filter((line) => line.endsWith(' o-1'))).toEqual([]);
  });

  it('with options.queue on each, the same message id runs once per queue, and a redelivery to one is skipped', async () => {
    const eu = new SqsServer('https://sqs.eu-west-1.amazonaws.com/1/named', 'orders-eu');
    const us = new SqsServer('https://sqs.us-east-1.amazonaws.com/1/named', 'orders-us');
    apps.push(await bootWith(NamedOrdersConsumer, eu, us));
    await eu.deliver('custom.named.order.placed', { orderId: 'o-2' }, 'm-2');
    await us.deliver('custom.named.order.placed', { orderId: 'o-2' }, 'm-2');
    await eu.deliver('custom.named.order.placed', { orderId: 'o-2' }, 'm-2');
    expect(seen.filter((line) => line.endsWith(' o-2'))).toEqual([`${eu.queueUrl} o-2`, `${us.queueUrl} o-2`]);
  });
});
