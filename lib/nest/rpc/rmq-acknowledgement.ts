import { Logger } from '@nestjs/common';
import { IdempotencyErrorCode, isIdempotencyError } from '../../core/index.js';
import type { Settlement } from '../transport.adapter.js';
import type { RmqChannelLike, RmqMessageLike } from './message-context.js';

/** What to tell the broker about one delivery. */
export type AckDecision =
  /** Done (stored, or a known duplicate): remove it from the queue. */
  | 'ack'
  /** Not done, may succeed later: the broker redelivers it. */
  | 'requeue'
  /** Can never succeed: removed, or dead-lettered when the queue has a dead-letter exchange. */
  | 'reject';

/**
 * Refusals that depend only on the message itself: a redelivery would be refused the
 * same way forever, so requeueing it would only spin. Everything else (a running
 * duplicate, the store being down, a misconfiguration awaiting a fix) is requeued.
 */
const PERMANENT_REFUSALS = new Set<string>([
  IdempotencyErrorCode.KeyMissing,
  IdempotencyErrorCode.KeyInvalid,
  IdempotencyErrorCode.FingerprintMismatch,
  IdempotencyErrorCode.RequestInvalid,
]);

export function ackDecisionOf(settlement: Settlement, error?: unknown): AckDecision {
  switch (settlement) {
    case 'stored':
    case 'replayed':
    case 'unprotected':
      return 'ack';
    case 'rejected':
      return isIdempotencyError(error) && PERMANENT_REFUSALS.has(error.code) ? 'reject' : 'requeue';
    default:
      // 'failed': the key was released, a redelivery runs the handler again.
      // 'abandoned': the lease stays until it expires, then a redelivery takes it over.
      return 'requeue';
  }
}

/**
 * Deliveries already acked or nacked. Settling one twice makes the broker close the
 * channel (PRECONDITION_FAILED - unknown delivery tag), dropping every other unacked
 * message on it, so each delivery is settled at most once whatever path reaches here.
 * amqplib creates one message object per delivery; a redelivery is a new object.
 */
const settledDeliveries = new WeakSet<object>();

const logger = new Logger('IdempotencyInterceptor');

/**
 * Acks or nacks a delivery once. Never throws: on a closed channel the broker has
 * already put the message back, and the redelivery will be replayed or run.
 * Returns true when this call settled it.
 */
export function settleDelivery(channel: RmqChannelLike, message: RmqMessageLike, decision: AckDecision): boolean {
  if (settledDeliveries.has(message)) return false;
  settledDeliveries.add(message);
  try {
    if (decision === 'ack') channel.ack(message);
    else channel.nack(message, false, decision === 'requeue');
    return true;
  } catch (error) {
    logger.warn(
      `Could not ${decision} RabbitMQ delivery ${String(message.fields?.deliveryTag)}: ${(error as Error)?.message ?? String(error)}. ` +
        'The channel closed first, so the broker redelivers the message, and the redelivery is replayed or run again.',
    );
    return false;
  }
}
