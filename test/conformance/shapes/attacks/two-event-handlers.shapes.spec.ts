import { Controller, Module, type ExecutionContext, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, Payload, Transport, type MicroserviceOptions, type RmqContext } from '@nestjs/microservices';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { RABBITMQ_URL, RabbitProbe, uniqueName, waitFor } from '../../../messages/support.js';

/**
 * A shape found by attack (issue 41): Nest lets several @EventPattern() handlers subscribe to ONE event
 * pattern (Server.addHandler chains them with `.next`). Each is its own operation (an
 * e-mail sender and a biller), but the message operation is `rmq queue=Q order.placed`
 * for both: the first handler claims the messageId, the second is "a duplicate" and is
 * skipped. The customer is billed but never e-mailed (or the reverse), silently.
 */
const seen: string[] = [];
const messageId = (ctx: ExecutionContext) =>
  (ctx.switchToRpc().getContext<RmqContext>().getMessage() as { properties: { messageId?: string } }).properties.messageId;

@Controller()
class EmailListener {
  @EventPattern<string>('order.placed')
  @Idempotent({ key: messageId })
  onPlaced(@Payload() data: { orderId: string }, @Ctx() _ctx: RmqContext) {
    seen.push(`email ${data.orderId}`);
  }
}

@Controller()
class BillingListener {
  @EventPattern<string>('order.placed')
  @Idempotent({ key: messageId })
  onPlaced(@Payload() data: { orderId: string }, @Ctx() _ctx: RmqContext) {
    seen.push(`billing ${data.orderId}`);
  }
}

@Controller()
class AuditListener {
  // Not @Idempotent(): the application merely imports IdempotencyModule.
  @EventPattern<string>('order.placed')
  onPlaced(@Payload() data: { orderId: string }) {
    seen.push(`audit ${data.orderId}`);
  }
}

@Controller()
class AnalyticsListener {
  @EventPattern<string>('order.placed')
  onPlaced(@Payload() data: { orderId: string }) {
    seen.push(`analytics ${data.orderId}`);
  }
}

describe('shape: importing IdempotencyModule drops every chained @EventPattern handler but the first (no @Idempotent at all)', () => {
  const queue = uniqueName('attack-chain');
  let app: INestMicroservice;
  let probe: RabbitProbe;
  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
      controllers: [AuditListener, AnalyticsListener],
    })
    class PlainModule {}
    app = await NestFactory.createMicroservice<MicroserviceOptions>(PlainModule, {
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: { durable: false } },
      logger: false,
    });
    await app.listen();
    probe = await RabbitProbe.open();
  });
  afterAll(async () => {
    await app?.close();
    await probe?.deleteQueues(queue);
    await probe?.close();
  });

  it('both undecorated handlers of one event pattern run', async () => {
    const orderId = uniqueName('order');
    probe.publish(queue, 'order.placed', { orderId });
    await waitFor('both handlers ran', () => seen.filter((s) => s.endsWith(orderId)).length === 2);
    expect(seen.filter((s) => s.endsWith(orderId)).sort()).toEqual([`analytics ${orderId}`, `audit ${orderId}`]);
  });
});

describe('shape: two @EventPattern handlers of one pattern share one record', () => {
  const queue = uniqueName('attack-two-handlers');
  let app: INestMicroservice;
  let probe: RabbitProbe;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
      controllers: [EmailListener, BillingListener],
    })
    class AppModule {}
    app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: { durable: false } },
      logger: false,
    });
    await app.listen();
    probe = await RabbitProbe.open();
  });
  afterAll(async () => {
    await app?.close();
    await probe?.deleteQueues(queue);
    await probe?.close();
  });

  it('both handlers run once for one message', async () => {
    const orderId = uniqueName('order');
    const messageId = uniqueName('msg');
    probe.publish(queue, 'order.placed', { orderId }, { messageId });
    await waitFor('both handlers ran', () => seen.filter((s) => s.endsWith(orderId)).length === 2);
    // A redelivery, then a marker (FIFO on one consumer): each handler skips the duplicate.
    probe.publish(queue, 'order.placed', { orderId }, { messageId });
    const marker = uniqueName('order');
    probe.publish(queue, 'order.placed', { orderId: marker }, { messageId: uniqueName('msg') });
    await waitFor('the marker after the duplicate', () => seen.filter((s) => s.endsWith(marker)).length === 2);
    expect(seen.filter((s) => s.endsWith(orderId)).sort()).toEqual([`billing ${orderId}`, `email ${orderId}`]);
  });
});
