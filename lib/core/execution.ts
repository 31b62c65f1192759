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

/**
 * Checks the numbers of a policy by the library's one rule (`checkWholeNumber`). Entry
 * points check their own options at boot, under their own names; the engine checks
 * again on every execution because a policy can be built by hand, and a NaN
 * `waitTimeout` or a fractional `ttl` would otherwise fail later and elsewhere.
 */
export function checkExecutionPolicy(owner: string, policy: ExecutionPolicy): void {
  checkWholeNumber(owner, 'ttl', policy.ttl, { unit: 'ms', example: '24 * 60 * 60 * 1000' });
  checkWholeNumber(owner, 'leaseTtl', policy.leaseTtl, { unit: 'ms', example: '30_000' });
  // 0 is meaningful: do not wait for a running duplicate at all.
  checkWholeNumber(owner, 'waitTimeout', policy.waitTimeout, { unit: 'ms', min: 0, example: '10_000' });
  checkWholeNumber(owner, 'maxResponseBytes', policy.maxResponseBytes, { example: '1_048_576' });
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
