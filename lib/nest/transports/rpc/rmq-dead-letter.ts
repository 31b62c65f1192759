import { createHash, randomUUID } from 'node:crypto';
import { encodeValue, serializeOutcome, type IdempotencyStore } from '../../../core/index.js';
import type { RmqMessageLike } from './message-context.js';

export const DEFAULT_MAX_DELIVERIES = 5;

/** Set by RabbitMQ quorum queues on every delivery after the first: how many came before. */
const BROKER_DELIVERY_COUNT = 'x-delivery-count';

/** Headers of the dead-lettered copy: why it is there, for whoever reads the dead-letter queue. */
export const DEAD_LETTER_HEADERS = {
  /** The last error, `Name: message`. */
  error: 'x-idempotency-error',
  /** How many deliveries the message had, the last one included. */
  deliveries: 'x-idempotency-deliveries',
  /** The handler that failed (`Class.method`). */
  handler: 'x-idempotency-handler',
  /** The queue it came from, to move it back once the cause is fixed. */
  queue: 'x-idempotency-queue',
} as const;

const MAX_ERROR_HEADER_LENGTH = 1_000;

/** The ordinal of this delivery as the broker counts it; `undefined` where the queue type keeps no count. */
export function brokerDeliveryOrdinal(message: RmqMessageLike): number | undefined {
  const raw = message.properties?.headers?.[BROKER_DELIVERY_COUNT];
  const count = typeof raw === 'number' || typeof raw === 'bigint' || typeof raw === 'string' ? Number(raw) : NaN;
  return Number.isSafeInteger(count) && count >= 0 ? count + 1 : undefined;
}

/**
 * Counts the failed deliveries of one message in the idempotency store, for queues whose
 * broker counts nothing (classic queues only flag `redelivered`). The idempotency record
 * cannot hold the count, since a failure releases it; and the store contract offers
 * no increment, only an atomic claim. So failure n claims marker n: the first marker
 * still free is this failure's number, whatever other instances do at the same time.
 *
 * A message is identified by its handler, `messageId` and body, which a redelivery
 * repeats byte for byte (a `key` derived from the payload could not tell two messages
 * that share it apart). A failure costs up to `limit` claims plus a write: only failing
 * messages pay, never the path of a message that succeeds.
 */
export class StoreDeliveryCounter {
  private readonly identity: string;

  constructor(
    private readonly store: IdempotencyStore,
    handler: string,
    message: RmqMessageLike & { readonly content?: Uint8Array },
  ) {
    const hash = createHash('sha256')
      .update(handler)
      .update('\u0000')
      .update(String(message.properties?.messageId ?? ''))
      .update('\u0000');
    if (message.content) hash.update(message.content);
    this.identity = 'deliveries\u0000' + hash.digest('base64url');
  }

  /** Records one failed delivery; resolves with how many there have been, at most `limit`. */
  async recordFailure(limit: number, ttl: number, leaseTtl: number): Promise<number> {
    for (let failure = 1; failure <= limit; failure++) {
      const key = this.markerKey(failure);
      const token = randomUUID();
      const claim = await this.store.claim(key, { token, leaseTtl });
      if (!claim.claimed) continue;
      // Completed, the marker outlives the lease and stays taken until the handler's ttl.
      await this.store.complete(key, token, { result: MARKER, ttl });
      return failure;
    }
    return limit;
  }

  /** Forgets the count once the message is dead-lettered, so that moving it back gives it its deliveries again. */
  async forget(limit: number): Promise<void> {
    const deletions: Promise<unknown>[] = [];
    for (let failure = 1; failure <= limit; failure++) deletions.push(this.store.delete(this.markerKey(failure)).catch(() => false));
    await Promise.all(deletions);
  }

  private markerKey(failure: number): string {
    // Store keys may only hold [A-Za-z0-9_-]; base64url keeps to it.
    return createHash('sha256').update(this.identity).update('\u0000').update(String(failure)).digest('base64url');
  }
}

/** What a marker holds: stores keep results opaque, but some keep them as JSON. */
const MARKER = serializeOutcome({ kind: 'value', value: encodeValue('failed delivery') });

/** The parts of an amqplib channel that publish a dead-lettered copy. */
export interface RmqPublishingChannel {
  publish(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options?: Record<string, unknown>,
    callback?: (error: unknown) => void,
  ): boolean;
  on?(event: 'return', listener: (message: { fields?: { exchange?: string; routingKey?: string } }) => void): unknown;
  removeListener?(event: 'return', listener: (message: { fields?: { exchange?: string; routingKey?: string } }) => void): unknown;
  waitForConfirms?(): Promise<void>;
}

export interface DeadLetterRoute {
  readonly exchange: string;
  readonly routingKey: string;
}

export interface DeadLetterFacts {
  readonly handler: string;
  readonly deliveries: number;
  readonly error: unknown;
  readonly queue?: string;
}

/**
 * Publishes a copy of `message` to the dead-letter route, carrying why it failed.
 * RabbitMQ cannot add headers to a message it dead-letters itself (reject), so the copy
 * is published and the caller acks the original once the broker has confirmed the copy.
 * `mandatory` makes the broker return a copy no queue takes, rather than drop it.
 *
 * Resolves `'published'`, or `'unroutable'` when no queue is bound to the route; rejects
 * when the channel fails (an exchange that does not exist closes it: check it first).
 */
export function publishDeadLetter(
  channel: RmqPublishingChannel,
  message: RmqMessageLike & { readonly content?: Uint8Array; readonly properties?: Record<string, unknown> },
  route: DeadLetterRoute,
  facts: DeadLetterFacts,
): Promise<'published' | 'unroutable'> {
  // An expiration would drop the copy from the dead-letter queue, and the broker refuses
  // a user id that is not the connection's own.
  const {
    headers: original,
    expiration: _expiration,
    userId: _userId,
    ...properties
  } = (message.properties ?? {}) as Record<string, unknown>;
  // The broker's count belongs to the queue the message left: a message moved back carrying
  // it would be counted as delivered already.
  const { [BROKER_DELIVERY_COUNT]: _count, ...headers } = (original ?? {}) as Record<string, unknown>;
  headers[DEAD_LETTER_HEADERS.error] = errorText(facts.error);
  headers[DEAD_LETTER_HEADERS.deliveries] = facts.deliveries;
  headers[DEAD_LETTER_HEADERS.handler] = facts.handler;
  if (facts.queue !== undefined) headers[DEAD_LETTER_HEADERS.queue] = facts.queue;
  const content = Buffer.from(message.content ?? new Uint8Array());
  const options = { ...properties, headers, mandatory: true };

  return new Promise((resolve, reject) => {
    let returned = false;
    // Only these copies are published as mandatory on a consumer channel; a return on the
    // same route before the confirm is this one (the broker sends the return first).
    const onReturn = (returnedMessage: { fields?: { exchange?: string; routingKey?: string } }) => {
      if (returnedMessage.fields?.exchange === route.exchange && returnedMessage.fields?.routingKey === route.routingKey) returned = true;
    };
    const confirmed = typeof channel.waitForConfirms === 'function';
    const done = (error?: unknown) => {
      channel.removeListener?.('return', onReturn);
      if (error) reject(error instanceof Error ? error : new Error(String(error)));
      else resolve(returned ? 'unroutable' : 'published');
    };
    channel.on?.('return', onReturn);
    try {
      // Without confirms (a plain channel) the ack that follows on the same channel is
      // still processed by the broker after this publish.
      channel.publish(route.exchange, route.routingKey, content, options, confirmed ? (error) => done(error ?? undefined) : undefined);
      if (!confirmed) done();
    } catch (error) {
      done(error);
    }
  });
}

function errorText(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > MAX_ERROR_HEADER_LENGTH ? text.slice(0, MAX_ERROR_HEADER_LENGTH - 1) + '…' : text;
}
