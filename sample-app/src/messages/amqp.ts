import { Controller, type INestApplication } from '@nestjs/common';
import { ClientProxyFactory, EventPattern, Payload, RmqRecordBuilder, Transport, type ClientProxy, type MicroserviceOptions } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { Idempotent } from '../../../lib/index.js';
import type { SampleAppConfig } from '../config.js';
import { OrderEventsConsumer } from './order-events.consumer.js';
import { OrderEventsPublisher, type OrderEventsTransport } from './order-events.publisher.js';
import { ORDER_PAID, type OrderPaidMessage } from './order-events.js';

/**
 * The RabbitMQ consumer of `order.paid` (active when AMQP_URL is set). RabbitMQ redelivers
 * every message whose consumer died before acking it, so:
 * - `@Idempotent({ ack: true })` keys each delivery by its `messageId`, skips (and acks) a
 *   duplicate, and acks the first only once its outcome is stored; a failure is nacked
 *   so the broker redelivers it;
 * - the consumer's own database transaction still ships the order once if the record of
 *   this layer is lost.
 */
@Controller()
export class OrderEventsRmqController {
  constructor(private readonly consumer: OrderEventsConsumer) {}

  @EventPattern<string>(ORDER_PAID)
  @Idempotent({ ack: true })
  async onOrderPaid(@Payload() message: OrderPaidMessage): Promise<void> {
    await this.consumer.handle(message);
  }
}

/** Publishes through RabbitMQ with `messageId` = the message's stable id. */
class RmqOrderEventsTransport implements OrderEventsTransport {
  constructor(private readonly client: ClientProxy) {}

  async publish(message: OrderPaidMessage): Promise<void> {
    const record = new RmqRecordBuilder(message).setOptions({ messageId: message.id, persistent: true }).build();
    await lastValueFrom(this.client.emit(ORDER_PAID, record), { defaultValue: undefined });
  }

  close(): Promise<void> {
    return this.client.close() as Promise<void>;
  }
}

/** Connects the consumer and routes the publisher to RabbitMQ. Call before `app.init()` / `listen()`. */
export function connectRabbitMq(app: INestApplication, config: SampleAppConfig): () => Promise<void> {
  if (!config.amqpUrl) return async () => {};
  const options = { urls: [config.amqpUrl], queue: config.amqpQueue, queueOptions: { durable: true } };
  app.connectMicroservice<MicroserviceOptions>({ transport: Transport.RMQ, options: { ...options, noAck: false, prefetchCount: 10 } });
  const transport = new RmqOrderEventsTransport(ClientProxyFactory.create({ transport: Transport.RMQ, options }) as ClientProxy);
  app.get(OrderEventsPublisher).useTransport(transport);
  return () => transport.close();
}
