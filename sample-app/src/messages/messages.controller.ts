import { BadRequestException, Body, Controller, HttpCode, Post } from '@nestjs/common';
import { OrderEventsConsumer } from './order-events.consumer.js';
import { ORDER_PAID, type OrderPaidMessage } from './order-events.js';

/**
 * A push endpoint, as brokers with HTTP push subscriptions call it: a 2xx answer is the
 * acknowledgement, anything else makes the broker redeliver. The demo uses it to
 * redeliver the same message many times, concurrently.
 */
@Controller('messages')
export class MessagesController {
  constructor(private readonly consumer: OrderEventsConsumer) {}

  @Post()
  @HttpCode(200)
  async receive(@Body() message: OrderPaidMessage) {
    if (message?.type !== ORDER_PAID || typeof message.id !== 'string' || !Number.isInteger(message.orderId)) {
      throw new BadRequestException(`Send { id: string, type: '${ORDER_PAID}', orderId: integer }.`);
    }
    return this.consumer.handle(message);
  }
}
