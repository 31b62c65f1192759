import type { Channel, ConsumeMessage } from 'amqplib';
import { IdempotencyErrorCode, isIdempotencyError, makeIdempotent, type IdempotencyStore } from '../../../lib/index.js';

export interface RefundCommand {
  refundId: string;
  amount: number;
}

/** Refusals a redelivery would meet again forever: reject them (dead-letter) instead of requeueing. */
const NEVER_SUCCEEDS: string[] = [
  IdempotencyErrorCode.KeyMissing,
  IdempotencyErrorCode.KeyInvalid,
  IdempotencyErrorCode.FingerprintMismatch,
];

/**
 * A plain amqplib consumer (no Nest transport): each message runs `refund` at most once
 * per messageId, and is acked only after its result is stored.
 */
export async function consumeRefunds(
  channel: Channel,
  queue: string,
  store: IdempotencyStore,
  refund: (command: RefundCommand) => Promise<void>,
): Promise<string> {
  const refundOnce = makeIdempotent((command: RefundCommand, _message: ConsumeMessage) => refund(command), {
    store,
    scope: 'refunds-consumer',
    key: (_command, message) => message.properties.messageId,
    // The same messageId with another body is refused, never replayed.
    fingerprint: (command) => command,
  });

  const { consumerTag } = await channel.consume(
    queue,
    async (message) => {
      if (!message) return; // the broker cancelled the consumer
      let decision: 'ack' | 'requeue' | 'reject';
      try {
        // First delivery: runs refund and stores the outcome. A duplicate: resolves from
        // the store. A duplicate while the first runs: waits for it, then resolves.
        await refundOnce(JSON.parse(message.content.toString()) as RefundCommand, message);
        decision = 'ack';
      } catch (error) {
        decision = isIdempotencyError(error) && NEVER_SUCCEEDS.includes(error.code) ? 'reject' : 'requeue';
      }
      try {
        if (decision === 'ack') channel.ack(message);
        else channel.nack(message, false, decision === 'requeue');
      } catch {
        // The channel closed meanwhile: the broker redelivers the message, and the
        // redelivery resolves from the store without running refund again.
      }
    },
    { noAck: false },
  );
  return consumerTag;
}
