import { randomUUID } from 'node:crypto';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyNotReplayableError,
  IdempotencyStoreUnavailableError,
} from './errors.js';
import type { IdempotencyEventListener, IdempotencyEventType, IdempotencyEvent } from './events.js';
import {
  decodeError,
  decodeValue,
  encodeError,
  encodeValue,
  serializeOutcome,
  deserializeOutcome,
  unstorableReason,
  type StoredOutcome,
} from './outcome.js';
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
  readonly onStoreError: StoreErrorStrategy;
  readonly maxResponseBytes: number;
  readonly onEvent?: IdempotencyEventListener;
  /** Name reported in events. */
  readonly handler?: string;
}

export interface ExecutionRequest {
  /** Scoped, hashed store key (see `storageKeyOf`). */
  readonly key: string;
  readonly fingerprint?: string;
}

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
 * The claim / complete / release protocol of DESIGN.md, once, for every transport.
 * Stateless apart from the in-process wake-up list, so one instance can serve a
 * whole application.
 */
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

  /**
   * Claims the key, or explains why the handler must not run. Throws
   * `IdempotencyFingerprintMismatchError`, `IdempotencyInFlightError` or
   * `IdempotencyStoreUnavailableError`.
   */
  async admit(request: ExecutionRequest, policy: ExecutionPolicy): Promise<Admission> {
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
        const failOpen = policy.onStoreError === 'fail-open';
        emit(policy, 'store_error', request.key, startedAt, { error, failOpen, storeLatencyMs: Date.now() - callStartedAt });
        if (failOpen) return { kind: 'unprotected' };
        throw new IdempotencyStoreUnavailableError(error);
      }
      const storeLatencyMs = Date.now() - callStartedAt;
      if (claim.claimed) {
        emit(policy, 'claimed', request.key, startedAt, { storeLatencyMs });
        return { kind: 'execute', lease: new Lease(this, request.key, token, policy, startedAt) };
      }
      const record = claim.record;
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

  /**
   * Runs `fn` at most once per key: the promise-based form used by `makeIdempotent`
   * and `IdempotencyService.run`. Replays return the stored value (JSON round-tripped,
   * except top-level strings, Buffers and `undefined`) or rethrow a cached error.
   */
  async execute<T>(request: ExecutionRequest, policy: ExecutionPolicy, fn: () => Promise<T> | T): Promise<ExecutionResult<T>> {
    const admission = await this.admit(request, policy);
    if (admission.kind === 'replay') return { value: replayValue(admission.outcome) as T, replayed: true };
    if (admission.kind === 'unprotected') return { value: await fn(), replayed: false };
    const { lease } = admission;
    let value: T;
    try {
      value = await fn();
    } catch (error) {
      await lease.fail(error, { kind: 'error', error: encodeError(error) });
      throw error;
    }
    const reason = unstorableReason(value);
    await lease.complete(reason ? { kind: 'unstorable', reason } : { kind: 'value', value: encodeValue(value) });
    return { value, replayed: false };
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
export function replayValue(outcome: StoredOutcome): unknown {
  switch (outcome.kind) {
    case 'value':
      return decodeValue(outcome.value);
    case 'error':
      throw decodeError(outcome.error);
    default:
      throw new IdempotencyNotReplayableError(outcome.reason);
  }
}

/**
 * Ownership of one claimed key while its handler runs. Renews itself every third of
 * the lease, and ends in exactly one of `complete`, `fail` or `abandon`.
 */
export class Lease {
  private renewTimer: NodeJS.Timeout | undefined;
  private settled = false;
  private lost = false;
  /** Until when the lease is ours as far as this process knows (claim or last successful renew + leaseTtl), epoch ms. */
  private leaseValidUntil: number;

  constructor(
    private readonly engine: IdempotencyEngine,
    readonly key: string,
    readonly token: string,
    private readonly policy: ExecutionPolicy,
    private readonly startedAt: number,
  ) {
    this.leaseValidUntil = Date.now() + policy.leaseTtl;
    engine.markRunning(key);
    this.renewTimer = setInterval(() => void this.renew(), Math.max(1, Math.floor(policy.leaseTtl / 3)));
    this.renewTimer.unref();
  }

  /** True once another worker took the key over; this execution's result will not be stored. */
  get isLost(): boolean {
    return this.lost;
  }

  /** Stores the outcome for replay. Never throws: a store failure here is reported, not raised. */
  async complete(outcome: StoredOutcome): Promise<void> {
    if (!this.finish()) return;
    let result: string | undefined;
    let reason = outcome.kind === 'unstorable' ? outcome.reason : undefined;
    if (!reason) {
      try {
        result = serializeOutcome(outcome);
        // A UTF-16 code unit is at most 3 UTF-8 bytes: most results need no byte count.
        const bytes = result.length * 3 <= this.policy.maxResponseBytes ? 0 : Buffer.byteLength(result);
        if (bytes > this.policy.maxResponseBytes) {
          reason = `the response is ${bytes} bytes, over maxResponseBytes (${this.policy.maxResponseBytes})`;
        }
      } catch (error) {
        reason = `the response is not serializable (${(error as Error).message})`;
      }
    }
    if (reason) {
      emit(this.policy, 'response_not_storable', this.key, this.startedAt, { reason });
      result = serializeOutcome({ kind: 'unstorable', reason });
    }
    await this.write(() => this.policy.store.complete(this.key, this.token, { result: result!, ttl: this.policy.ttl }), 'completed');
  }

  /**
   * The handler threw. Stores `cachedOutcome` when `cacheErrors` selects the error,
   * otherwise releases the key so the client may retry.
   */
  async fail(error: unknown, cachedOutcome: StoredOutcome): Promise<void> {
    if (this.policy.cacheErrors?.(error)) {
      if (!this.finish()) return;
      let result: string;
      try {
        result = serializeOutcome(cachedOutcome);
      } catch {
        result = serializeOutcome({ kind: 'error', error: { name: 'Error', message: 'error not serializable' } });
      }
      await this.write(() => this.policy.store.complete(this.key, this.token, { result, ttl: this.policy.ttl }), 'error_cached');
      return;
    }
    await this.release();
  }

  /** Gives the key back so that a retry runs the handler again. */
  async release(): Promise<void> {
    if (!this.finish()) return;
    await this.write(() => this.policy.store.release(this.key, this.token), 'released');
  }

  /**
   * The outcome is unknown (the caller cancelled, the process is shutting down): keep
   * the key leased and let the lease run out, because releasing could let a retry
   * repeat an effect that did happen.
   */
  abandon(): void {
    if (!this.finish()) return;
    emit(this.policy, 'abandoned', this.key, this.startedAt, {});
    this.engine.markSettled(this.key);
  }

  private finish(): boolean {
    if (this.settled) return false;
    this.settled = true;
    clearInterval(this.renewTimer);
    this.renewTimer = undefined;
    return true;
  }

  private async write(op: () => Promise<boolean>, success: IdempotencyEventType): Promise<void> {
    const callStartedAt = Date.now();
    try {
      const owned = await op();
      const storeLatencyMs = Date.now() - callStartedAt;
      if (owned) emit(this.policy, success, this.key, this.startedAt, { storeLatencyMs });
      else this.reportLost(storeLatencyMs);
    } catch (error) {
      emit(this.policy, 'store_error', this.key, this.startedAt, { error, failOpen: false, storeLatencyMs: Date.now() - callStartedAt });
      // A failed release needs no retry: the lease runs out by itself.
      if (success !== 'released') this.retryStoreWrite(op, success);
    } finally {
      this.engine.markSettled(this.key);
    }
  }

  /**
   * The handler's effect happened but its outcome could not be stored (the store blipped).
   * Giving up would let a retry run the effect a second time once the lease runs out, so
   * keep trying in the background, with backoff, while the lease is still ours.
   */
  private retryStoreWrite(op: () => Promise<boolean>, success: IdempotencyEventType, delay = 50): void {
    if (Date.now() + delay >= this.leaseValidUntil) {
      this.reportLost();
      return;
    }
    const timer = setTimeout(() => {
      const callStartedAt = Date.now();
      op().then(
        (owned) => {
          const storeLatencyMs = Date.now() - callStartedAt;
          if (owned) emit(this.policy, success, this.key, this.startedAt, { storeLatencyMs });
          else this.reportLost(storeLatencyMs);
        },
        (error: unknown) => {
          emit(this.policy, 'store_error', this.key, this.startedAt, {
            error,
            failOpen: false,
            storeLatencyMs: Date.now() - callStartedAt,
          });
          this.retryStoreWrite(op, success, Math.min(delay * 2, 1_000));
        },
      );
    }, delay);
    timer.unref();
  }

  private async renew(): Promise<void> {
    if (this.settled) return;
    const renewStartedAt = Date.now();
    try {
      const owned = await this.policy.store.renew(this.key, this.token, this.policy.leaseTtl);
      if (owned) this.leaseValidUntil = renewStartedAt + this.policy.leaseTtl;
      if (!owned && !this.settled) {
        clearInterval(this.renewTimer);
        this.reportLost();
      }
    } catch (error) {
      // A transient store error: the next tick tries again while the lease lasts.
      emit(this.policy, 'store_error', this.key, this.startedAt, { error, failOpen: false });
    }
  }

  private reportLost(storeLatencyMs?: number): void {
    if (this.lost) return;
    this.lost = true;
    emit(this.policy, 'lease_lost', this.key, this.startedAt, { storeLatencyMs });
  }
}

function emit(
  policy: ExecutionPolicy,
  type: IdempotencyEventType,
  key: string,
  startedAt: number,
  extra: Partial<Pick<IdempotencyEvent, 'error' | 'failOpen' | 'reason' | 'storeLatencyMs'>>,
): void {
  if (!policy.onEvent) return;
  const at = Date.now();
  try {
    policy.onEvent({ type, key, handler: policy.handler, at, durationMs: at - startedAt, ...extra });
  } catch {
    // A faulty listener must not change the outcome of the request.
  }
}
