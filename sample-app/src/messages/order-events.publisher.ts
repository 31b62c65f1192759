import { Injectable, Logger } from '@nestjs/common';
import { OrderEventsConsumer } from './order-events.consumer.js';
import { orderPaidMessage, type OrderPaidMessage } from './order-events.js';

/** Where `order.paid` goes: RabbitMQ when AMQP_URL is set (see amqp.ts), else an in-process queue. */
export interface OrderEventsTransport {
  publish(message: OrderPaidMessage): Promise<void>;
}

/**
 * Publishes after the order's transaction committed. Without a broker it delivers in
 * process, asynchronously and at least once: a failed delivery is retried, as a broker
 * would redeliver a nacked message.
 */
@Injectable()
export class OrderEventsPublisher {
  private readonly logger = new Logger('OrderEvents');
  private transport: OrderEventsTransport | undefined;
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly consumer: OrderEventsConsumer) {}

  /** Routes messages to a broker instead of the in-process queue. */
  useTransport(transport: OrderEventsTransport): void {
    this.transport = transport;
  }

  async publishOrderPaid(orderId: number): Promise<void> {
    const message = orderPaidMessage(orderId);
    if (this.transport) return this.transport.publish(message);
    const delivery = this.deliverInProcess(message).finally(() => this.pending.delete(delivery));
    this.pending.add(delivery);
  }

  /** Resolves once every in-process delivery has settled (tests, shutdown). */
  async drain(): Promise<void> {
    while (this.pending.size) await Promise.allSettled([...this.pending]);
  }

  private async deliverInProcess(message: OrderPaidMessage, attempts = 5): Promise<void> {
    for (let attempt = 1; attempt <= attempts; attempt++) {
      await new Promise((resolve) => setImmediate(resolve));
      try {
        await this.consumer.handle(message); // resolved = committed = ack
        return;
      } catch (error) {
        this.logger.warn(`${message.id} delivery ${attempt} failed (${(error as Error).message}); redelivering`);
        await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
      }
    }
  }
}
