import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import type { Channel } from 'amqplib';
import { IdempotencyErrorCode, IdempotencyService, isIdempotencyError } from '../../../lib/index.js';

const NEVER_SUCCEEDS: string[] = [
  IdempotencyErrorCode.KeyMissing,
  IdempotencyErrorCode.KeyInvalid,
  IdempotencyErrorCode.FingerprintMismatch,
];

/**
 * Inside a Nest application whose consumer is not a Nest transport (a library of its
 * own, a JetStream pull consumer, ...): IdempotencyService.run uses the module's store.
 */
@Injectable()
export class RefundsListener implements OnModuleDestroy {
  private channel?: Channel;
  readonly refunded: string[] = [];

  constructor(private readonly idempotency: IdempotencyService) {}

  async listen(channel: Channel, queue: string): Promise<void> {
    this.channel = channel;
    await channel.consume(
      queue,
      async (message) => {
        if (!message) return;
        const body = JSON.parse(message.content.toString()) as { refundId: string; amount: number };
        try {
          await this.idempotency.run(message.properties.messageId, () => this.refund(body), { scope: 'refunds', fingerprint: body });
          channel.ack(message);
        } catch (error) {
          // No key, or a key reused with another body: a redelivery cannot fix it.
          channel.nack(message, false, !(isIdempotencyError(error) && NEVER_SUCCEEDS.includes(error.code)));
        }
      },
      { noAck: false },
    );
  }

  async onModuleDestroy(): Promise<void> {
    await this.channel?.close();
  }

  private async refund(body: { refundId: string; amount: number }): Promise<void> {
    this.refunded.push(body.refundId);
  }
}
