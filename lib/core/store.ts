import type { IdempotencyEventListener } from './events.js';
import type { StagedOutbox } from './outbox-store.js';
import type { ClaimResult, IdempotencyRecord } from './record.js';

/** What `IdempotencyStore.claim` is asked to record with a new lease. */
export interface ClaimRequest {
  /** A fresh random token that identifies this attempt in later compare-and-set writes. */
  readonly token: string;
  /** How long the lease lasts before another worker may take the key over, in ms. */
  readonly leaseTtl: number;
  /** Stored with the lease so concurrent duplicates can be checked against it. */
  readonly fingerprint?: string;
}

/** What `IdempotencyStore.complete` stores: the serialized outcome and how long to keep it. */
export interface CompleteRequest {
  /** Opaque serialized outcome to replay. */
  readonly result: string;
  /** How long the completed record is kept, in ms. */
  readonly ttl: number;
  /**
   * The messages the execution staged in the outbox, given only to a store with an outbox
   * (`IdempotencyOutboxStore`): staged in the same atomic write as the completion.
   */
  readonly outbox?: StagedOutbox;
}

/** What `IdempotencyStore.saveStep` records: one finished step of an execution. */
export interface StepRequest {
  /** The step's id within the key (`[A-Za-z0-9_-]`, at most 64 characters): the core derives it from the step name and the fingerprint. */
  readonly step: string;
  /** Opaque serialized result of the step. */
  readonly result: string;
  /** How long the step record is kept, in ms (the execution's retention): it outlives a release of the key. */
  readonly ttl: number;
}

/**
 * The step records of `step()` (docs/steps.md), an optional capability of a store. Every
 * built-in store has it; `step()` refuses to run on a store without it.
 * - `loadSteps` returns every live step record of the key (any attempt, any
 *   fingerprint), by step id, in one round trip; `{}` when there is none.
 * - `saveStep` is a compare-and-set on `token`, like `renew`: it records the step
 *   (replacing one of the same id) and returns `true` only while the key is
 *   `in_progress` under that exact token and its lease has not expired; otherwise it
 *   changes nothing and returns `false` (the lease was lost: fencing).
 * - Step records live at least `ttl` after their write (a store may keep one expiry per
 *   key, pushed back by each write), whatever happens to the key's record:
 *   `release` and a lease running out leave them (a retry resumes from them); `delete`
 *   removes them with the record. They never take part in `claim`.
 */
export interface IdempotencyStepStore {
  loadSteps(key: string): Promise<Readonly<Record<string, string>>>;
  saveStep(key: string, token: string, request: StepRequest): Promise<boolean>;
}

/** True when `store` can record steps (see `IdempotencyStepStore`). */
export function supportsSteps<S extends IdempotencyStore>(store: S): store is S & IdempotencyStepStore {
  return typeof store.loadSteps === 'function' && typeof store.saveStep === 'function';
}

/** What the handlers that use a store need of it, as `IdempotencyModule` tells `verify()` at boot. */
export interface StoreRequirements {
  /** The largest serialized result one of them may store, bytes (their largest `maxResponseBytes`). */
  readonly maxResponseBytes?: number;
}

/**
 * The persistence contract. A backend implements only these atomic primitives; all
 * hashing, validation, state logic and policy live once in the core.
 *
 * Every method must be a single atomic operation on the backend:
 * - `claim` creates an `in_progress` record when the key is absent, or when the
 *   existing record is an `in_progress` one whose lease has expired, or a completed
 *   one past its retention; otherwise it returns the existing record untouched.
 * - `complete`, `release` and `renew` are compare-and-set on `token`: they change
 *   nothing and return `false` unless the key is `in_progress` under that exact token
 *   (and, for `renew` and `complete`, the lease has not expired yet). A `complete`
 *   repeated under the token that completed the record may answer `true` (never
 *   changing the stored result); a store doing so reports that token as
 *   `CompletedRecord.leaseToken`, so a retried write whose first reply was lost is not
 *   mistaken for a lost lease.
 *
 * Keys handed to a store are already hashed and scoped by the core; they contain only
 * `[A-Za-z0-9_-]`, so a store may embed them in its own key format safely.
 *
 * Run `describeStoreContract()` from `nestjs-idempotency/testing` against your own
 * implementation to check it.
 */
export interface IdempotencyStore {
  claim(key: string, request: ClaimRequest): Promise<ClaimResult>;
  complete(key: string, token: string, request: CompleteRequest): Promise<boolean>;
  release(key: string, token: string): Promise<boolean>;
  renew(key: string, token: string, leaseTtl: number): Promise<boolean>;
  /** The live record, or `undefined` when absent or expired. */
  get(key: string): Promise<IdempotencyRecord | undefined>;
  /** Removes the record whatever its state (support tooling), and its step records; true when one existed. */
  delete(key: string): Promise<boolean>;
  /** Optional: every step record of the key, by step id (see `IdempotencyStepStore`). */
  loadSteps?(key: string): Promise<Readonly<Record<string, string>>>;
  /** Optional: records a finished step, compare-and-set on the lease token (see `IdempotencyStepStore`). */
  saveStep?(key: string, token: string, request: StepRequest): Promise<boolean>;
  /** Optional readiness probe for health checks. */
  ping?(): Promise<void>;
  /**
   * Optional boot check, called once when the application initialises (for the module's
   * store and every handler's own store). Throw an `IdempotencyConfigurationError` when
   * the store can never work as configured (its table does not exist, its driver is not
   * supported): `app.init()` then rejects with that message. Any other error means the
   * store is only unreachable for now; it is logged and the application still starts.
   * `requirements` says what the handlers that use the store need of it.
   */
  verify?(requirements?: StoreRequirements): Promise<void>;
  /**
   * Optional: lets the module hear what the store does on its own, outside any request
   * (the memory store evicting an unexpired result, a failed background purge), so those
   * events reach the same listeners and log as every other. Store-wide events carry an
   * empty `key`. Returns a function that removes the listener.
   */
  addEventListener?(listener: IdempotencyEventListener): () => void;
  /**
   * Optional: releases what the store opened itself (never a client or connection the
   * application passed in), such as the Redis near cache's own connection. The module
   * calls it once on shutdown, for its store and every handler's own store.
   */
  close?(): Promise<void>;
}

/** Injection token for the store, same name as the interface (as in @nestjs/throttler). */
export const IdempotencyStore = Symbol.for('nestjs-idempotency:IdempotencyStore');

export interface TransactionalRequest {
  readonly key: string;
  readonly fingerprint?: string;
  /** Retention of the stored result, ms. */
  readonly ttl: number;
}

export type TransactionalResult<T> =
  /** This call ran the work; its writes and the record committed together. */
  | { readonly kind: 'executed'; readonly value: T }
  /** The key had already committed: `result` is the stored outcome to replay. */
  | { readonly kind: 'replay'; readonly result: string };

/**
 * A store that can write the idempotency record in the same database transaction as
 * the business change (see `@Idempotent({ transactional: true })`). A concurrent
 * duplicate waits for the first transaction and then replays; a rollback (thrown
 * error, crash) leaves no record, so the retry runs cleanly. Throws
 * `IdempotencyFingerprintMismatchError` when the committed record has another fingerprint.
 */
export interface TransactionalIdempotencyStore extends IdempotencyStore {
  runTransactional<T>(request: TransactionalRequest, work: () => Promise<{ value: T; result: string }>): Promise<TransactionalResult<T>>;
}

export function isTransactionalStore(store: IdempotencyStore): store is TransactionalIdempotencyStore {
  return typeof (store as Partial<TransactionalIdempotencyStore>).runTransactional === 'function';
}
