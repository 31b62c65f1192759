import { Logger } from '@nestjs/common';
import { IdempotencyErrorCode, isIdempotencyError, type IdempotencyStore } from '../../../core/index.js';
import type { Settlement } from '../../transport.adapter.js';
import type { RmqChannelLike, RmqMessageLike } from './message-context.js';
import { rmqConsumerOf } from './rmq-consumers.js';
import {
  DEAD_LETTER_HEADERS,
  StoreDeliveryCounter,
  brokerDeliveryOrdinal,
  publishDeadLetter,
  type RmqPublishingChannel,
} from './rmq-dead-letter.js';

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

/** Nest's logger under the library's context (these lines are written where no module logger is at hand). */
const logger = new Logger('Idempotency');

/**
 * Takes the one right to settle a delivery, for a path that decides asynchronously
 * (counting deliveries, publishing a dead-letter copy): any later path leaves it alone.
 * False when another path has it already.
 */
export function claimDelivery(message: RmqMessageLike): boolean {
  if (settledDeliveries.has(message)) return false;
  settledDeliveries.add(message);
  return true;
}

/**
 * Acks or nacks a delivery once. Never throws: on a closed channel the broker has
 * already put the message back, and the redelivery will be replayed or run.
 * Returns true when this call settled it.
 */
export function settleDelivery(channel: RmqChannelLike, message: RmqMessageLike, decision: AckDecision): boolean {
  return claimDelivery(message) && sendDecision(channel, message, decision);
}

/**
 * Sends `decision` for a delivery claimed with `claimDelivery`. `failed`: the handler
 * threw, so a requeue is sent as `basic.reject`, which RabbitMQ 4.3+ quorum queues count
 * as a failed delivery (`basic.nack` no longer counts there, and stays for requeues
 * that are no failure of the message: a store outage, a duplicate still running).
 */
export function sendDecision(channel: RmqChannelLike, message: RmqMessageLike, decision: AckDecision, failed = false): boolean {
  try {
    if (decision === 'ack') channel.ack(message);
    else if (failed && decision === 'requeue' && typeof channel.reject === 'function') channel.reject(message, true);
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

/**
 * A request a caller waits on (Nest's `ClientProxy.send` sets `replyTo`): whatever the
 * handler ends with, Nest's server answers it there, an error included.
 */
export function isAnsweredRequest(message: RmqMessageLike): boolean {
  const replyTo = message.properties?.replyTo;
  return typeof replyTo === 'string' && replyTo !== '';
}

/** What is known about a delivery whose handler threw. */
export interface DeliveryFailure {
  readonly handler: string;
  readonly error: unknown;
  /** `maxDeliveries`. */
  readonly limit: number;
  /** Where deliveries are counted when the broker does not count them. */
  readonly store: IdempotencyStore;
  readonly ttl: number;
  readonly leaseTtl: number;
}

/**
 * Exchanges whose dead-letter publish failed (one that does not exist closes the channel):
 * publishing there again would close every new channel in turn, so later messages past
 * the limit are rejected for the broker to dead-letter (or drop) as the queue says.
 */
const failedDeadLetterExchanges = new Set<string>();

/**
 * Settles a delivery (already claimed) whose handler threw: requeued while it has
 * deliveries left, dead-lettered with its error once it has had `limit` of them. Never
 * throws. Deliveries are counted by the broker where it does (quorum queues), else in
 * the store; a count the store cannot give means requeue, never a message dropped.
 */
export async function settleFailedDelivery(channel: RmqChannelLike, message: RmqMessageLike, failure: DeliveryFailure): Promise<void> {
  let counter: StoreDeliveryCounter | undefined;
  let deliveries = brokerDeliveryOrdinal(message);
  if (deliveries === undefined && failure.limit > 1) {
    counter = new StoreDeliveryCounter(failure.store, failure.handler, message);
    try {
      deliveries = await counter.recordFailure(failure.limit, failure.ttl, failure.leaseTtl);
    } catch (error) {
      logger.warn(
        `${failure.handler}: could not count the deliveries of a failed RabbitMQ message in the store (${(error as Error)?.message ?? String(error)}); it is requeued.`,
      );
    }
  }
  deliveries ??= failure.limit === 1 ? 1 : undefined;
  if (deliveries === undefined || deliveries < failure.limit) {
    sendDecision(channel, message, 'requeue', true);
    return;
  }
  await deadLetter(channel, message, failure, deliveries);
  await counter?.forget(failure.limit);
}

async function deadLetter(channel: RmqChannelLike, message: RmqMessageLike, failure: DeliveryFailure, deliveries: number): Promise<void> {
  const consumer = rmqConsumerOf(channel);
  const what = `${failure.handler}: RabbitMQ message ${describeMessage(message)} failed ${deliveries} deliveries (maxDeliveries ${failure.limit}; last error: ${errorMessage(failure.error)})`;
  const exchange = consumer?.deadLetterExchange;
  const publishing = channel as unknown as Partial<RmqPublishingChannel>;
  const exists = exchange === undefined || failedDeadLetterExchanges.has(exchange) ? undefined : await consumer?.exchangeExists(exchange);
  if (exchange !== undefined && exists === false) {
    logger.error(
      `${what}. Its dead-letter exchange '${exchange}' does not exist, so the message is rejected and RabbitMQ drops it: ` +
        'declare the exchange and a queue bound to it (docs/messages.md).',
    );
  } else if (exchange !== undefined && exists === true && typeof publishing.publish === 'function') {
    const route = { exchange, routingKey: consumer?.deadLetterRoutingKey ?? message.fields?.routingKey ?? '' };
    let outcome: 'published' | 'unroutable';
    try {
      outcome = await publishDeadLetter(publishing as RmqPublishingChannel, message, route, {
        ...failure,
        deliveries,
        queue: consumer?.queue,
      });
    } catch (error) {
      failedDeadLetterExchanges.add(exchange);
      logger.error(
        `${what}. Publishing it to the dead-letter exchange '${exchange}' failed: ${errorMessage(error)}. The channel closed, so the broker requeues it ` +
          '(Nest opens a new channel when the connection reconnects); until a restart, messages past maxDeliveries are rejected for the broker to dead-letter, ' +
          'without the error header. Declare the exchange (docs/messages.md).',
      );
      return;
    }
    if (outcome === 'published') {
      sendDecision(channel, message, 'ack');
      logger.warn(`${what}: dead-lettered to exchange '${exchange}' with the error in its ${DEAD_LETTER_HEADERS.error} header.`);
      return;
    }
    logger.error(
      `${what}. The dead-letter exchange '${exchange}' routes routing key '${route.routingKey}' to no queue, so the message is lost: ` +
        'declare the dead-letter queue and bind it (docs/messages.md).',
    );
  } else if (exchange !== undefined) {
    logger.warn(
      `${what}: rejected without requeue for the broker to dead-letter to '${exchange}', without the error header (the exchange could not be checked).`,
    );
  } else {
    logger.warn(
      `${what}: rejected without requeue. Its queueOptions declare no dead-letter exchange, so the broker keeps it only if a policy gives the queue one, and without the error header.`,
    );
  }
  sendDecision(channel, message, 'reject');
}

function describeMessage(message: RmqMessageLike): string {
  const messageId = message.properties?.messageId;
  return messageId === undefined || messageId === null || messageId === ''
    ? `(delivery ${String(message.fields?.deliveryTag)}, no messageId)`
    : String(messageId);
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
