import type { ExecutionContext } from '@nestjs/common';
import type { CacheErrors, IdempotencyStore, InFlightStrategy, StoreErrorStrategy } from '../core/index.js';
import type { PrincipalResult } from './principal.js';

type MaybePromise<T> = T | Promise<T>;

/**
 * Options of one idempotent handler. Set defaults for all handlers in
 * `IdempotencyModule.forRoot()`, and override any of them per handler in `@Idempotent()`.
 * Every duration is in milliseconds.
 */
export interface IdempotentOptions {
  /**
   * Where records live. Share one store (Redis, PostgreSQL) between every instance
   * that serves the same routes.
   * @default a process-local MemoryIdempotencyStore created by the module
   */
  store?: IdempotencyStore;
  /** How long a completed result is kept and replayed, ms. @default 86400000 (24 h) */
  ttl?: number;
  /**
   * How long a running execution owns its key before another may take it over, ms.
   * Renewed every third of it while the handler runs, so it only bounds how long a
   * crashed worker blocks its key.
   * @default 30000
   */
  leaseTtl?: number;
  /**
   * Request header carrying the key. `X-Idempotency-Key` is always accepted as well.
   * The value may be a bare token or a structured-field string (`"abc"`).
   * @default 'Idempotency-Key'
   */
  header?: string;
  /**
   * When true, a request without a key is refused with 400; when false it runs the
   * handler without idempotency.
   * @default true
   */
  required?: boolean;
  /**
   * Derives the key from the request or message instead of the header: for keys that
   * live in the body (a webhook's event id) or in message metadata. Return
   * `undefined` when there is none. On a method called without a request (a provider
   * method, an event listener, a BullMQ processor, a schedule) `key` receives the
   * method's own arguments instead: see `IdempotentMethodOptions`. On a WebSocket
   * gateway handler (`@SubscribeMessage()`) it receives the message's data and the client,
   * `(data, client)`, as `fingerprint` does, and is required (docs/websockets.md).
   * @default the `header` on HTTP; the transport's message id on microservices
   */
  key?: (context: ExecutionContext) => MaybePromise<string | number | undefined | null>;
  /**
   * The principal or tenant part of the scope. Keys are always scoped per operation
   * (`POST /v1/refunds/:id`, `rmq orders-eu refund.create`); this says who is asking, so
   * one caller's key never replays another's response. Return a string or number (an id
   * object with `toHexString()` works too; `7` and `'7'` are two principals), or
   * `IdempotencyPrincipal.of('api-client', id)` to name the kind of caller where several
   * kinds share ids; `undefined` means anonymous (also for a request that carries
   * credentials: your explicit choice); anything else refuses the request with
   * `IDEMPOTENCY_CONFIGURATION_ERROR`. Read it from what your authentication set, never
   * from a header the client chooses.
   * @default the caller on `request.user` (`.id`, `.sub`, `.userId` or `._id`), `request.auth` (`.sub`, `.payload.sub`, `.user`, `.id`, `.userId`) and `request.currentUser`, typed, with its source, and qualified by the `iss` / `tid` / `tenantId` beside it; one that is set without an id is refused, and so is a request with credentials (an `Authorization`, `X-API-Key`, `X-Access-Token` or `X-Auth-Token` header, a token cookie, a session holding a user) but no caller
   */
  scope?: (context: ExecutionContext) => MaybePromise<PrincipalResult>;
  /**
   * What must match for a key to be reused: a function returning the material to
   * hash, or false to turn the check off. Same key + different fingerprint is 422.
   * @default HTTP: method, route params, query string and body; microservices: the payload
   */
  fingerprint?: false | ((context: ExecutionContext) => unknown);
  /**
   * A duplicate that arrives while the first is running: `'reject'` answers 409 with
   * `Retry-After`; `'wait'` waits up to `waitTimeout` for the first and replays it.
   * @default 'reject' on HTTP, 'wait' for message patterns
   */
  inFlight?: InFlightStrategy;
  /** Longest wait of `inFlight: 'wait'`, ms; past it the duplicate gets 409. @default 10000 */
  waitTimeout?: number;
  /**
   * Errors stored and replayed like a result, instead of releasing the key: a predicate
   * (`(e) => e instanceof HttpException && e.getStatus() < 500`), or the error classes
   * whose instances are (`[CardDeclinedError]`). HTTP, RPC and GraphQL throw the error
   * again on a duplicate, rebuilt on the nearest class of its chain that is listed (else
   * Nest's own exception class of that name, else `Error`), so the application's
   * exception filters answer it as they answered the first caller. In process (provider methods, jobs, events), a
   * replay rethrows an instance of a listed class, with the stored name, message and
   * fields; an error a predicate selected comes back as the nearest built-in class of its
   * chain (`RangeError`, ..., else `Error`) with the stored name, message and fields.
   * @default none: every thrown error releases the key so the client may retry
   */
  cacheErrors?: CacheErrors;
  /**
   * The store is unreachable: `'fail-closed'` answers 503; `'fail-open'` runs the
   * handler without protection and reports a `store_error` event.
   * @default 'fail-closed'
   */
  onStoreError?: StoreErrorStrategy;
  /**
   * Response headers stored and replayed (case-insensitive), added to the defaults
   * `content-type`, `location`, `content-location`, `content-language`,
   * `content-disposition`, `etag`, `last-modified`, `link`. `Set-Cookie` and
   * `Authorization` are only replayed when listed here explicitly (see docs/security.md).
   * @default []
   */
  replayHeaders?: string[];
  /**
   * Largest serialized response stored, bytes. A larger one is still sent to the first
   * caller, but duplicates get 409 `IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE` (never a
   * different or truncated body), and a `response_not_storable` event is reported.
   * @default 1048576 (1 MiB)
   */
  maxResponseBytes?: number;
  /**
   * Run the handler and write the record in one database transaction. Needs a store
   * with transactions (`TypeOrmIdempotencyStore`); get the transaction's EntityManager
   * in the handler with `getIdempotentTransaction()` from `nestjs-idempotency/typeorm`.
   * @default false
   */
  transactional?: boolean;
  /**
   * RabbitMQ with manual acknowledgement (`noAck: false`): the library acknowledges
   * each message itself, only once its result is stored. A known duplicate is acked
   * at once, a running duplicate once the first completes, a failure is nacked with
   * requeue so the broker redelivers it (up to `maxDeliveries`), and a message that can
   * never succeed (no key, an invalid key, a key reused with another payload) is rejected
   * without requeue (dead-lettered when the queue has a dead-letter exchange). Do not ack
   * in the handler as well. A consumer in auto-ack mode (`noAck: true`, Nest's default), or
   * `ack: true` on a handler of another transport (NATS, Kafka, MQTT, TCP, Redis, gRPC),
   * is refused with `IDEMPOTENCY_CONFIGURATION_ERROR`; on HTTP it is refused at boot.
   * See docs/messages.md.
   * @default false
   */
  ack?: boolean;
  /**
   * With `ack: true` on RabbitMQ: how many deliveries a message whose handler keeps
   * throwing gets. The delivery that fails for the `maxDeliveries`-th time is not
   * requeued but dead-lettered: a copy carrying the error in `x-idempotency-error` goes
   * to the queue's dead-letter exchange, then the original is acked. Counted by the
   * broker on quorum queues (`x-delivery-count`), otherwise in the store. See docs/messages.md.
   * @default 5
   */
  maxDeliveries?: number;
}
