import { randomUUID } from 'node:crypto';
import type { ErrorClass } from './cached-errors.js';
import {
  IdempotencyErrorCode,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyNotReplayableError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from './errors.js';
import { checkExecutionPolicy, emitExecutionEvent as emit, type ExecutionPolicy, type ExecutionRequest } from './execution.js';
import { Lease } from './lease.js';
import { OrphanClaims } from './orphan-claims.js';
import { isResolvedPolicy } from './policy.js';
import { decodeError, decodeValue, encodeError, deserializeOutcome, valueOutcome, type StoredOutcome } from './outcome.js';
import { runWithoutProtection } from './step-context.js';
import { TimerQueue } from './timer-queue.js';

// The types of an execution and of its lease, for the modules that import them from here.
export type { ExecutionPolicy, ExecutionRequest, InFlightStrategy, StoreErrorStrategy } from './execution.js';
export type { Lease } from './lease.js';

export type Admission =
  /** Run the handler, then settle the lease. */
  | { readonly kind: 'execute'; readonly lease: Lease }
  /** Do not run the handler: replay this outcome. */
  | { readonly kind: 'replay'; readonly outcome: StoredOutcome }
  /** The store failed and the policy is fail-open: run the handler without protection. */
  | { readonly kind: 'unprotected' };

const RETRY_AFTER_MS = 1_000;
const FIRST_POLL_MS = 20;
const MAX_POLL_MS = 250;

/**
 * The claim / complete / release protocol (docs/concepts.md), once, for every transport:
 * what to do with a request (run the handler under a lease, replay, refuse, wait, or run
 * unprotected through an outage). Its state is process-local and shared by every key
 * (the wake-up list of running keys, the claims whose undo is unconfirmed, the renewal
 * queues), so one instance can serve a whole application. The lease and its writes are
 * in lease.ts.
 */
// It is a LeaseOwner by its shape (checked where leases are made): an `implements` clause
// would name members the published types strip as internal, and fail without skipLibCheck.
export class IdempotencyEngine {
  /**
   * Executions running in this process, so local waiters wake at once instead of
   * polling: the wake-up callbacks of their waiters (none until someone waits).
   */
  private readonly running = new Map<string, Array<() => void> | undefined>();
  /**
   * Lease tokens are this engine's random id plus a counter: unique across processes
   * (122 random bits) and cheaper than a UUID per claim. They are compared, never secret.
   */
  private readonly tokenPrefix = `${randomUUID()}.`;
  private tokenCounter = 0;
  /** Claims that failed for their caller and whose undo is unconfirmed (see `OrphanClaims`). */
  private readonly orphanClaims = new OrphanClaims();
  /** The running leases to renew, one queue per renewal interval. */
  private readonly renewals = new Map<number, TimerQueue<Lease>>();

  /**
   * Claims the key, or explains why the handler must not run. Throws
   * `IdempotencyFingerprintMismatchError`, `IdempotencyInFlightError` or
   * `IdempotencyStoreUnavailableError`.
   */
  admit(request: ExecutionRequest, policy: ExecutionPolicy): Promise<Admission> {
    // The caller runs the handler itself, inside the execution's context: lease.run() for
    // an admitted one, runWithoutProtection() for one run through an outage. Nothing is
    // entered into the caller's own context, which its caller and other work share.
    return this.claim(request, policy);
  }

  private async claim(request: ExecutionRequest, policy: ExecutionPolicy): Promise<Admission> {
    // A policy from resolvePolicy() was checked once, when it was resolved; only one built by hand is checked here.
    // A constant owner: a name built per call would cost an allocation on every request.
    if (!isResolvedPolicy(policy)) checkExecutionPolicy('IdempotencyEngine', policy);
    const startedAt = Date.now();
    const deadline = startedAt + policy.waitTimeout;
    let pollDelay = FIRST_POLL_MS;
    let reportedConflict = false;
    for (;;) {
      const token = this.tokenPrefix + (++this.tokenCounter).toString(36);
      const callStartedAt = Date.now();
      let claim;
      try {
        claim = await policy.store.claim(request.key, { token, leaseTtl: policy.leaseTtl, fingerprint: request.fingerprint });
      } catch (error) {
        const storeLatencyMs = Date.now() - callStartedAt;
        // The library's own errors already say what went wrong (a missing table is a
        // configuration error, not an outage): they reach the caller as they are, and
        // only an outage may run the handler unprotected.
        const known = isIdempotencyError(error);
        const outage = !known || error.code === IdempotencyErrorCode.StoreUnavailable;
        if (outage) this.orphanClaims.undo(policy.store, request.key, token, callStartedAt + policy.leaseTtl);
        const failOpen = outage && policy.onStoreError === 'fail-open';
        emit(policy, 'store_error', request.key, startedAt, { error, failOpen, storeLatencyMs });
        if (failOpen) return { kind: 'unprotected' };
        throw known ? error : new IdempotencyStoreUnavailableError(error);
      }
      const storeLatencyMs = Date.now() - callStartedAt;
      if (claim.claimed) {
        emit(policy, 'claimed', request.key, startedAt, { storeLatencyMs });
        const lease = new Lease(this, request.key, token, policy, startedAt, request.fingerprint);
        return { kind: 'execute', lease };
      }
      const record = claim.record;
      if (record.status !== 'completed' && this.orphanClaims.has(request.key, record.leaseToken)) {
        // Our own earlier claim, which failed for its caller and ran no handler: undo it
        // and claim again at once instead of answering 409 for a lease nobody owns, or
        // 422 to another body for a request that never ran.
        if (await this.orphanClaims.release(policy.store, request.key, record.leaseToken)) continue;
      }
      if (request.fingerprint !== undefined && record.fingerprint !== undefined && record.fingerprint !== request.fingerprint) {
        emit(policy, 'fingerprint_mismatch', request.key, startedAt, { storeLatencyMs });
        throw new IdempotencyFingerprintMismatchError();
      }
      if (record.status === 'completed') {
        emit(policy, 'replayed', request.key, startedAt, { storeLatencyMs });
        return { kind: 'replay', outcome: deserializeOutcome(record.result) };
      }
      if (!reportedConflict) {
        reportedConflict = true;
        emit(policy, 'in_flight_conflict', request.key, startedAt, { storeLatencyMs });
      }
      const remaining = deadline - Date.now();
      if (policy.inFlight === 'reject' || remaining <= 0) {
        throw new IdempotencyInFlightError(RETRY_AFTER_MS);
      }
      await this.waitForChange(request.key, Math.min(pollDelay, remaining));
      pollDelay = Math.min(MAX_POLL_MS, Math.ceil(pollDelay * 1.5));
    }
  }

  /** @internal Number of claims whose undo is unconfirmed (tests). */
  get orphanClaimsPending(): number {
    return this.orphanClaims.size;
  }

  /**
   * Runs `fn` at most once per key: the promise-based form used by `makeIdempotent`
   * and `IdempotencyService.run`. Replays return a faithful copy of the stored value
   * (`'faithful'` encoding: Date, Map, Set, bigint, Buffer... come back as themselves) or
   * rethrow a cached error; a value that cannot be copied is reported as not storable.
   */
  async execute<T>(request: ExecutionRequest, policy: ExecutionPolicy, fn: () => Promise<T> | T): Promise<ExecutionResult<T>> {
    // No slot in the caller's context: the function runs in one of the lease's own (lease.run).
    const admission = await this.claim(request, policy);
    if (admission.kind === 'replay') return { value: replayValue(admission.outcome, policy.errorClasses) as T, replayed: true };
    if (admission.kind === 'unprotected') return { value: await runWithoutProtection(fn), replayed: false };
    const { lease } = admission;
    let value: T;
    try {
      value = await lease.run(fn);
    } catch (error) {
      // Encoded only when it is stored: a released key needs no copy of the error.
      if (policy.cacheErrors?.(error)) await lease.storeError({ kind: 'error', error: encodeError(error) });
      else await lease.release();
      throw error;
    }
    await lease.complete(valueOutcome(value, 'faithful'));
    return { value, replayed: false };
  }

  /** @internal The queue that renews leases every `interval` ms. */
  renewalsEvery(interval: number): TimerQueue<Lease> {
    let queue = this.renewals.get(interval);
    if (!queue) this.renewals.set(interval, (queue = new TimerQueue<Lease>(interval, renewLease, true)));
    return queue;
  }

  /** @internal */
  markRunning(key: string): void {
    this.running.set(key, undefined);
  }

  /** @internal */
  markSettled(key: string): void {
    const waiters = this.running.get(key);
    this.running.delete(key);
    if (waiters) for (const wake of waiters) wake();
  }

  private waitForChange(key: string, delay: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delay);
      if (!this.running.has(key)) return;
      let waiters = this.running.get(key);
      if (!waiters) this.running.set(key, (waiters = []));
      waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

export interface ExecutionResult<T> {
  readonly value: T;
  readonly replayed: boolean;
}

/** Turns a stored outcome back into the value (or thrown error) of a plain function. */
export function replayValue(outcome: StoredOutcome, errorClasses?: readonly ErrorClass[]): unknown {
  switch (outcome.kind) {
    case 'value':
      return decodeValue(outcome.value);
    case 'error':
      throw decodeError(outcome.error, errorClasses);
    default:
      throw new IdempotencyNotReplayableError(outcome.reason);
  }
}

function renewLease(lease: Lease): void {
  lease.renewNow();
}
