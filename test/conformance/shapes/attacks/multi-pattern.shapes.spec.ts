import { Controller, Module, type ExecutionContext, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, Payload, Transport, type MicroserviceOptions, type RmqContext } from '@nestjs/microservices';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { RABBITMQ_URL, RabbitProbe, uniqueName, waitFor } from '../../../messages/support.js';

/**
 * A shape found by attack (issue 41, "two operations never share a record"): Nest registers
 * `@EventPattern(['order.created', 'order.cancelled'])` as two handlers, one per pattern,
 * and the same key sent on two patterns to two separate handlers runs each once. On one
 * handler declaring both, the operation is the declared list joined, `rmq queue=Q
 * order.created|order.cancelled`, not the pattern that was received: the cancellation of
 * an order whose producer uses the order id as messageId is skipped as a duplicate of its
 * creation.
 */
const seen: string[] = [];
const messageId = (ctx: ExecutionContext) =>
  (ctx.switchToRpc().getContext<RmqContext>().getMessage() as { properties: { messageId?: string } }).properties.messageId;

@Controller()
class OrdersProjection {
  @EventPattern(['order.created', 'order.cancelled'])
  @Idempotent({ key: messageId })
  apply(@Payload() data: { orderId: string }, @Ctx() ctx: RmqContext) {
    seen.push(`${ctx.getPattern()} ${data.orderId}`);
  }
}

describe('shape: one handler, two patterns', () => {
  const queue = uniqueName('attack-multi');
  let app: INestMicroservice;
  let probe: RabbitProbe;
  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [OrdersProjection] })
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

  it('order.created and order.cancelled with one messageId each run', async () => {
    const orderId = uniqueName('order');
    probe.publish(queue, 'order.created', { orderId }, { messageId: orderId });
    probe.publish(queue, 'order.cancelled', { orderId }, { messageId: orderId });
    await waitFor('both ran', () => seen.filter((s) => s.endsWith(orderId)).length === 2);
    expect(seen.filter((s) => s.endsWith(orderId))).toEqual([`order.created ${orderId}`, `order.cancelled ${orderId}`]);
  });
});
