import type { IdempotencyEvent, IdempotencyEventListener, IdempotencyEventType } from './events.js';
import type { ErrorClass } from './cached-errors.js';
import { listenedTypesOf } from './listened-types.js';
import { checkWholeNumber } from './options.js';
import type { IdempotencyStore } from './store.js';

/** What to do with a duplicate that arrives while the first execution is still running. */
export type InFlightStrategy = 'reject' | 'wait';
/** What to do when the store fails. */
export type StoreErrorStrategy = 'fail-closed' | 'fail-open';

/** The resolved policy for one execution. Every duration is in milliseconds. */
export interface ExecutionPolicy {
  readonly store: IdempotencyStore;
  readonly ttl: number;
  readonly leaseTtl: number;
  readonly inFlight: InFlightStrategy;
  readonly waitTimeout: number;
  readonly cacheErrors?: (error: unknown) => boolean;
  /** The classes a replayed cached error is rebuilt as (the classes `cacheErrors` listed). */
  readonly errorClasses?: readonly ErrorClass[];
  readonly onStoreError: StoreErrorStrategy;
  readonly maxResponseBytes: number;
  readonly onEvent?: IdempotencyEventListener;
  /** Name reported in events. */
  readonly handler?: string;
}

/** The numbers of a policy, as `checkPolicyNumbers` reads them. */
export interface PolicyNumbers {
  readonly ttl?: unknown;
  readonly leaseTtl?: unknown;
  readonly waitTimeout?: unknown;
  readonly maxResponseBytes?: unknown;
}

/**
 * How an entry point words and bounds its numbers: `makeIdempotent` calls the size
 * `maxResultBytes`; `@Idempotent()` and `IdempotencyModule.forRoot()` want a `waitTimeout`
 * above 0 (the engine and `makeIdempotent` take 0: do not wait at all).
 */
export interface PolicyNumberRules {
  readonly waitTimeoutMin: 0 | 1;
  readonly bytesName: string;
  readonly bytesExample?: string;
}

/** The engine's wording: what `IdempotencyEngine` and `makeIdempotent` say. */
export const ENGINE_NUMBER_RULES: PolicyNumberRules = { waitTimeoutMin: 0, bytesName: 'maxResponseBytes', bytesExample: '1_048_576' };

/**
 * The library's one check of a policy's numbers (`checkWholeNumber`: whole milliseconds,
 * whole bytes), under the name of the entry point that was given them (`makeIdempotent(pay)`,
 * `@Idempotent() on A.b`).
 */
export function checkPolicyNumbers(owner: string, options: PolicyNumbers, rules: PolicyNumberRules = ENGINE_NUMBER_RULES): void {
  checkWholeNumber(owner, 'ttl', options.ttl, { unit: 'ms', example: '24 * 60 * 60 * 1000' });
  checkWholeNumber(owner, 'leaseTtl', options.leaseTtl, { unit: 'ms', example: '30_000' });
  checkWholeNumber(owner, 'waitTimeout', options.waitTimeout, { unit: 'ms', min: rules.waitTimeoutMin, example: '10_000' });
  checkWholeNumber(owner, rules.bytesName, options.maxResponseBytes, { example: rules.bytesExample });
}

/**
 * Checks the numbers of a policy built by hand (the engine does, on every execution, for
 * a policy `resolvePolicy` did not make): a NaN `waitTimeout` or a fractional `ttl` would
 * otherwise fail later and elsewhere.
 */
export function checkExecutionPolicy(owner: string, policy: ExecutionPolicy): void {
  checkPolicyNumbers(owner, policy);
}

export interface ExecutionRequest {
  /** Scoped, hashed store key (see `storageKeyOf`). */
  readonly key: string;
  readonly fingerprint?: string;
}

/**
 * Reports one step of an execution to the policy's listener, if it listens to that type.
 * Never throws: a faulty listener must not change the outcome of the request.
 */
export function emitExecutionEvent(
  policy: ExecutionPolicy,
  type: IdempotencyEventType,
  key: string,
  startedAt: number,
  extra: Partial<Pick<IdempotencyEvent, 'error' | 'failOpen' | 'reason' | 'storeLatencyMs'>>,
): void {
  const listener = policy.onEvent;
  if (!listener) return;
  const types = listenedTypesOf(listener);
  if (types !== undefined && !types.has(type)) return;
  const at = Date.now();
  try {
    policy.onEvent({ type, key, handler: policy.handler, at, durationMs: at - startedAt, ...extra });
  } catch {
    // Swallowed on purpose (see above).
  }
}
