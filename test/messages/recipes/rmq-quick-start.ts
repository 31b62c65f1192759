import { randomUUID } from 'node:crypto';
import { Controller, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, MessagePattern, Payload, Transport, type RmqOptions } from '@nestjs/microservices';
import * as amqp from 'amqplib';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../lib/index.js';

export interface RefundCommand {
  refundId: string;
  accountId: string;
  amount: number;
}

@Injectable()
export class RefundsService {
  async refund(_command: RefundCommand): Promise<void> {}
  async quote(command: RefundCommand) {
    // A new id on every run: a duplicate that gets the same quoteId got the stored answer.
    return { quoteId: randomUUID(), refundId: command.refundId, amount: command.amount };
  }
}

@Controller()
export class RefundsConsumer {
  constructor(private readonly refunds: RefundsService) {}

  // Keyed by the message's `messageId` property; acked only after the result is stored.
  // A refund that keeps failing is retried, and dead-lettered at its 5th failed delivery (maxDeliveries).
  @EventPattern('refund.requested')
  @Idempotent({ ack: true })
  async refund(@Payload() command: RefundCommand): Promise<void> {
    await this.refunds.refund(command);
  }

  // A duplicate request gets the first answer.
  @MessagePattern('refund.quote')
  @Idempotent({ ack: true })
  quote(@Payload() command: RefundCommand) {
    return this.refunds.quote(command);
  }
}

// In production: a store shared by every instance (RedisIdempotencyStore, TypeOrmIdempotencyStore).
const sharedStore = new MemoryIdempotencyStore();

@Module({
  imports: [IdempotencyModule.forRoot({ isGlobal: true, store: sharedStore })],
  controllers: [RefundsConsumer],
  providers: [RefundsService],
})
export class RefundsModule {}

/** Manual acknowledgement, and where messages that cannot succeed go. */
export function refundsTransport(url: string, queue: string): RmqOptions {
  return {
    transport: Transport.RMQ,
    options: {
      urls: [url],
      queue,
      noAck: false, // manual acknowledgement: the library acks (ack: true)
      queueOptions: { durable: true, deadLetterExchange: `${queue}.dead-letter` },
    },
  };
}

/**
 * The dead-letter exchange and the queue that keeps what reaches it. Nest declares only
 * the consumer's own queue: without a queue bound to its dead-letter exchange, RabbitMQ
 * drops every message sent there.
 */
export async function declareDeadLetterQueue(url: string, queue: string): Promise<void> {
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    await channel.assertExchange(`${queue}.dead-letter`, 'fanout', { durable: true });
    await channel.assertQueue(`${queue}.dead`, { durable: true });
    await channel.bindQueue(`${queue}.dead`, `${queue}.dead-letter`, '');
  } finally {
    await connection.close();
  }
}

export async function bootstrap(url = 'amqp://localhost:5672', queue = 'refunds') {
  await declareDeadLetterQueue(url, queue);
  const app = await NestFactory.createMicroservice(RefundsModule, refundsTransport(url, queue));
  await app.listen();
  return app;
}
