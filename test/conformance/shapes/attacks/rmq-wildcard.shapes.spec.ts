import { Controller, Module, type ExecutionContext, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, Payload, Transport, type MicroserviceOptions, type RmqContext } from '@nestjs/microservices';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { RABBITMQ_URL, RabbitProbe, uniqueName, waitFor } from '../../../messages/support.js';

/**
 * A shape found by attack (issue 41, item 3): Nest's RabbitMQ server with `wildcards: true` (a topic
 * exchange, the queue bound per pattern) routes `orders.eu` and `orders.us` to one
 * `@EventPattern<string>('orders.*')` handler; the routing key is what Nest matched, exactly as
 * the MQTT topic under `sensors/+` or the NATS subject under `shipments.*`, which ARE
 * parts of the operation. On RabbitMQ it is not: `rmq queue=Q orders.*` for both, so the
 * US order with the same messageId is skipped as a duplicate of the EU one.
 */
const seen: string[] = [];
const messageId = (ctx: ExecutionContext) =>
  (ctx.switchToRpc().getContext<RmqContext>().getMessage() as { properties: { messageId?: string } }).properties.messageId;

@Controller()
class OrdersConsumer {
  @EventPattern<string>('orders.*')
  @Idempotent({ key: messageId })
  placed(@Payload() data: { orderId: string }, @Ctx() ctx: RmqContext) {
    seen.push(`${ctx.getPattern()} ${data.orderId}`);
  }
}

describe('shape: RabbitMQ wildcard routing keys under one pattern share records', () => {
  const queue = uniqueName('attack-wild');
  const exchange = uniqueName('attack-wild-x');
  let app: INestMicroservice;
  let probe: RabbitProbe;

  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [OrdersConsumer] })
    class AppModule {}
    app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, exchange, wildcards: true, queueOptions: { durable: false } },
      logger: false,
    });
    await app.listen();
    probe = await RabbitProbe.open();
  });
  afterAll(async () => {
    await app?.close();
    await probe?.deleteQueues(queue);
    await probe?.channel.deleteExchange(exchange).catch(() => undefined);
    await probe?.close();
  });

  it('orders.eu and orders.us with one messageId each run (as MQTT topics and NATS subjects do)', async () => {
    const orderId = uniqueName('order');
    const id = uniqueName('msg');
    for (const rk of ['orders.eu', 'orders.us']) {
      probe.channel.publish(exchange, rk, Buffer.from(JSON.stringify({ pattern: rk, data: { orderId } })), { messageId: id });
    }
    const ran = () => seen.filter((s) => s.endsWith(orderId)).sort();
    await waitFor('both routing keys ran', () => ran().length === 2);
    // A redelivery to orders.eu, then a marker: the queue is FIFO on one consumer, so once the marker ran the duplicate was handled.
    probe.channel.publish(exchange, 'orders.eu', Buffer.from(JSON.stringify({ pattern: 'orders.eu', data: { orderId } })), {
      messageId: id,
    });
    const marker = uniqueName('order');
    probe.channel.publish(exchange, 'orders.eu', Buffer.from(JSON.stringify({ pattern: 'orders.eu', data: { orderId: marker } })), {
      messageId: uniqueName('msg'),
    });
    await waitFor('the marker after the duplicate', () => seen.some((s) => s.endsWith(marker)));
    expect(ran()).toEqual([`orders.eu ${orderId}`, `orders.us ${orderId}`]);
  });
});
