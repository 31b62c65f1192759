import { randomUUID } from 'node:crypto';
import {
  IdempotencyErrorCode,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyNotReplayableError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from './errors.js';
import type { IdempotencyEventListener, IdempotencyEventType, IdempotencyEvent } from './events.js';
import {
  decodeError,
  decodeValue,
  encodeError,
  serializeOutcome,
  deserializeOutcome,
  valueOutcome,
  type StoredOutcome,
} from './outcome.js';
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
 * Most claims whose undo is still unconfirmed, per engine. Past it a failed claim is
 * simply left to its lease, so an outage cannot grow this list without bound.
 */
const MAX_ORPHAN_CLAIMS = 10_000;

/**
 * The claim / complete / release protocol (docs/concepts.md), once, for every transport.
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
   * Claims that failed on the client side and whose undoing release did not get an
   * answer either (key -> token -> until when its lease can hold, epoch ms). Such a
   * claim may still be executed by the store later (a command still in a socket, or
   * resent by the client after a reconnection) and would lock the key for a lease
   * nobody owns; when a retry in this process meets one, it releases it and claims again.
   * Insertion order is roughly expiry order, so sweeping from the head stays cheap.
   */
  private readonly orphanClaims = new Map<string, Map<string, number>>();
  private orphanClaimCount = 0;
  /** The running leases to renew, one schedule per renewal interval (see `RenewalSchedule`). */
  private readonly renewals = new Map<number, RenewalSchedule>();

  /**
   * Claims the key, or explains why the handler must not run. Throws
   * `IdempotencyFingerprintMismatchError`, `IdempotencyInFlightError` or
   * `IdempotencyStoreUnavailableError`.
   */
  async admit(request: ExecutionRequest, policy: ExecutionPolicy): Promise<Admission> {
    // A constant owner: a name built per call would cost an allocation on every request.
    checkExecutionPolicy('IdempotencyEngine', policy);
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
        if (outage) this.undoFailedClaim(request.key, token, policy, callStartedAt);
        const failOpen = outage && policy.onStoreError === 'fail-open';
        emit(policy, 'store_error', request.key, startedAt, { error, failOpen, storeLatencyMs });
        if (failOpen) return { kind: 'unprotected' };
        throw known ? error : new IdempotencyStoreUnavailableError(error);
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
      if (this.isOrphanClaim(request.key, record.leaseToken)) {
        // Our own earlier claim, which failed for its caller and ran no handler: undo it
        // and claim again at once instead of answering 409 for a lease nobody owns.
        if (await this.releaseOrphanClaim(request.key, record.leaseToken, policy)) continue;
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
   * A claim failed on the client side (timeout, lost connection), so the store may
   * still execute it: a command waiting in a socket of a hung server runs when the
   * server resumes. The release is sent at once, on the same connection for a
   * single-connection client such as ioredis, so it runs right after that late claim
   * and the key is free as soon as the store answers again. Checked against this
   * claim's token, it can never remove anyone else's lease.
   */
  private undoFailedClaim(key: string, token: string, policy: ExecutionPolicy, claimedAt: number): void {
    let release: Promise<boolean>;
    try {
      release = policy.store.release(key, token);
    } catch {
      return;
    }
    this.addOrphanClaim(key, token, claimedAt + policy.leaseTtl);
    // Kept unless the release removed the lease: a `false` may only mean that the claim
    // has not reached the store yet (another pooled connection), and a rejection leaves
    // the outcome unknown again. A retry in this process then undoes it (isOrphanClaim).
    release.then(
      (released) => released && this.removeOrphanClaim(key, token),
      () => undefined,
    );
  }

  private async releaseOrphanClaim(key: string, token: string, policy: ExecutionPolicy): Promise<boolean> {
    try {
      const released = await policy.store.release(key, token);
      this.removeOrphanClaim(key, token);
      return released;
    } catch {
      return false;
    }
  }

  private addOrphanClaim(key: string, token: string, until: number): void {
    this.sweepOrphanClaims(Date.now(), 2);
    if (this.orphanClaimCount >= MAX_ORPHAN_CLAIMS) return;
    let tokens = this.orphanClaims.get(key);
    if (!tokens) this.orphanClaims.set(key, (tokens = new Map()));
    if (!tokens.has(token)) this.orphanClaimCount++;
    tokens.set(token, until);
  }

  private removeOrphanClaim(key: string, token: string): void {
    const tokens = this.orphanClaims.get(key);
    if (!tokens?.delete(token)) return;
    this.orphanClaimCount--;
    if (tokens.size === 0) this.orphanClaims.delete(key);
  }

  private isOrphanClaim(key: string, token: string): boolean {
    if (this.orphanClaimCount === 0) return false;
    const until = this.orphanClaims.get(key)?.get(token);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.removeOrphanClaim(key, token);
    return false;
  }

  /** Drops orphan claims whose lease has run out anyway, a few per call from the oldest key. */
  private sweepOrphanClaims(now: number, budget: number): void {
    for (const [key, tokens] of this.orphanClaims) {
      for (const [token, until] of tokens) {
        if (until > now || budget-- <= 0) return;
        this.removeOrphanClaim(key, token);
      }
    }
  }

  /** @internal Number of claims whose undo is unconfirmed (tests). */
  get orphanClaimsPending(): number {
    return this.orphanClaimCount;
  }

  /**
   * Runs `fn` at most once per key: the promise-based form used by `makeIdempotent`
   * and `IdempotencyService.run`. Replays return a faithful copy of the stored value
   * (`'faithful'` encoding: Date, Map, Set, bigint, Buffer... come back as themselves) or
   * rethrow a cached error; a value that cannot be copied is reported as not storable.
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
    await lease.complete(valueOutcome(value, 'faithful'));
    return { value, replayed: false };
  }

  /** @internal The schedule that renews leases every `interval` ms. */
  renewalsEvery(interval: number): RenewalSchedule {
    let schedule = this.renewals.get(interval);
    if (!schedule) this.renewals.set(interval, (schedule = new RenewalSchedule(interval)));
    return schedule;
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
  /** @internal When the next renewal is due (`performance.now()` ms), while the lease is on its schedule. */
  renewDueAt = 0;
  private readonly renewals: RenewalSchedule;
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
    // One timer per renewal interval for all the leases of the engine, not one per lease:
    // a lease costs every first execution an entry in a Set instead of a timer.
    this.renewals = engine.renewalsEvery(Math.max(1, Math.floor(policy.leaseTtl / 3)));
    this.renewals.add(this);
  }

  /** @internal Called by the schedule when a renewal is due. */
  renewNow(): void {
    void this.renew();
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
    await this.write(new CompleteWrite(this.policy.store, this.key, this.token, result!, this.policy.ttl, 'completed'));
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
      await this.write(new CompleteWrite(this.policy.store, this.key, this.token, result, this.policy.ttl, 'error_cached'));
      return;
    }
    await this.release();
  }

  /** Gives the key back so that a retry runs the handler again. */
  async release(): Promise<void> {
    if (!this.finish()) return;
    await this.write(new ReleaseWrite(this.policy.store, this.key, this.token));
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
    this.renewals.delete(this);
    return true;
  }

  private async write(write: SettlingWrite): Promise<void> {
    const callStartedAt = Date.now();
    try {
      const owned = await write.send();
      // The usual answer is reported here, without a further async step per execution.
      if (owned) emit(this.policy, write.success, this.key, this.startedAt, { storeLatencyMs: Date.now() - callStartedAt });
      else await this.report(write, owned, false, callStartedAt);
    } catch (error) {
      emit(this.policy, 'store_error', this.key, this.startedAt, { error, failOpen: false, storeLatencyMs: Date.now() - callStartedAt });
      this.retryStoreWrite(write);
    } finally {
      this.engine.markSettled(this.key);
    }
  }

  /**
   * A settling write failed with an unknown outcome: it may have been applied with only
   * its reply lost. Sending it again is safe, because each is a compare-and-set on this
   * lease's token: a `complete` (the handler's effect happened, so the key must never be
   * released instead) is kept trying so a retry after the lease cannot run the effect a
   * second time; a `release` is kept trying so the key is free for the client's retry
   * rather than a whole lease later. Both stop once the lease, as last renewed, ran out.
   */
  private retryStoreWrite(write: SettlingWrite, delay = 50): void {
    if (Date.now() + delay >= this.leaseValidUntil) {
      // An unconfirmed release needs no report: the lease runs out by itself.
      if (write.success !== 'released') this.reportLost();
      return;
    }
    const timer = setTimeout(() => {
      const callStartedAt = Date.now();
      write.send().then(
        (owned) => this.report(write, owned, true, callStartedAt),
        (error: unknown) => {
          emit(this.policy, 'store_error', this.key, this.startedAt, {
            error,
            failOpen: false,
            storeLatencyMs: Date.now() - callStartedAt,
          });
          this.retryStoreWrite(write, Math.min(delay * 2, 1_000));
        },
      );
    }, delay);
    timer.unref();
  }

  /** Reports a settling write that got an answer; never throws. */
  private async report(write: SettlingWrite, owned: boolean, retried: boolean, callStartedAt: number): Promise<void> {
    if (!owned) owned = await write.appliedEarlier(retried);
    const storeLatencyMs = Date.now() - callStartedAt;
    if (owned) emit(this.policy, write.success, this.key, this.startedAt, { storeLatencyMs });
    // A repeated release that finds nothing may have removed the lease the first time:
    // either way the key is not ours and nobody was fenced out, so it is no lease loss.
    else if (!(retried && write.success === 'released')) this.reportLost(storeLatencyMs);
  }

  private async renew(): Promise<void> {
    if (this.settled) return;
    const renewStartedAt = Date.now();
    try {
      const owned = await this.policy.store.renew(this.key, this.token, this.policy.leaseTtl);
      if (owned) this.leaseValidUntil = renewStartedAt + this.policy.leaseTtl;
      if (!owned && !this.settled) {
        this.renewals.delete(this);
        this.reportLost();
      }
    } catch (error) {
      // A transient store error: the next tick tries again while the lease lasts. A renew
      // that lands late only extends this lease, so there is nothing to undo; releasing
      // instead would free the key while the handler still runs.
      emit(this.policy, 'store_error', this.key, this.startedAt, { error, failOpen: false });
    }
  }

  private reportLost(storeLatencyMs?: number): void {
    if (this.lost) return;
    this.lost = true;
    emit(this.policy, 'lease_lost', this.key, this.startedAt, { storeLatencyMs });
  }
}

/**
 * The running leases that renew every `interval` ms, on one timer. A lease joins when it
 * is claimed and leaves when it settles; as they share one interval, leases fall due in
 * the order they joined, and a Set (which iterates in insertion order) holds them next
 * due first. The timer is armed for the first lease only, as `setInterval` per lease
 * would renew them: every `interval` ms from the claim.
 */
class RenewalSchedule {
  private readonly leases = new Set<Lease>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly interval: number) {}

  add(lease: Lease): void {
    lease.renewDueAt = performance.now() + this.interval;
    this.leases.add(lease);
    if (!this.timer) this.arm(this.interval);
  }

  delete(lease: Lease): void {
    // While other leases run, the timer stays armed (when it fires with nothing due, it
    // re-arms for the next lease); the last one out stops it, so no timer outlives the work.
    if (this.leases.delete(lease) && this.leases.size === 0) this.stop();
  }

  private stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(delay: number): void {
    this.timer = setTimeout(this.fire, delay);
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    // Monotonic, like the timers: a wall clock set back would hold renewals past the lease.
    const now = performance.now();
    const due: Lease[] = [];
    for (const lease of this.leases) {
      if (lease.renewDueAt > now) break;
      due.push(lease);
    }
    // Due again one interval later, behind the leases not yet due (the order stays the due order).
    for (const lease of due) {
      this.leases.delete(lease);
      lease.renewDueAt += this.interval;
      if (lease.renewDueAt <= now) lease.renewDueAt = now + this.interval;
      this.leases.add(lease);
    }
    const next = this.leases.values().next();
    if (!next.done) this.arm(next.value.renewDueAt - now);
    for (const lease of due) lease.renewNow();
  };
}

/** One settling compare-and-set write of a lease, which can be sent again. */
interface SettlingWrite {
  readonly success: IdempotencyEventType;
  send(): Promise<boolean>;
  /**
   * The write answered false: whether an earlier attempt of it had already been
   * applied (its reply lost), rather than the lease being lost. Never throws.
   */
  appliedEarlier(retried: boolean): Promise<boolean>;
}

class CompleteWrite implements SettlingWrite {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly key: string,
    private readonly token: string,
    private readonly result: string,
    private readonly ttl: number,
    readonly success: 'completed' | 'error_cached',
  ) {}

  send(): Promise<boolean> {
    return this.store.complete(this.key, this.token, { result: this.result, ttl: this.ttl });
  }

  /**
   * Even a first attempt may have been sent twice (a client resends a command caught
   * by a reconnection). A store that keeps the completing token answers a repeat with
   * true already, and reports that token on the record; for one that does not, a
   * retried write compares the stored result with ours. Anything else (a record still
   * leased, absent, or completed under another token) is a lost lease.
   */
  async appliedEarlier(retried: boolean): Promise<boolean> {
    let record;
    try {
      record = await this.store.get(this.key);
    } catch {
      return false;
    }
    if (record?.status !== 'completed') return false;
    if (record.leaseToken !== undefined) return record.leaseToken === this.token;
    // Without the token, an equal result proves nothing for a first attempt (a runner that
    // took the key over may have stored the same answer), only for a repeat of ours.
    return retried && record.result === this.result;
  }
}

class ReleaseWrite implements SettlingWrite {
  readonly success = 'released' as const;
  constructor(
    private readonly store: IdempotencyStore,
    private readonly key: string,
    private readonly token: string,
  ) {}

  send(): Promise<boolean> {
    return this.store.release(this.key, this.token);
  }

  async appliedEarlier(): Promise<boolean> {
    return false;
  }
}

function emit(
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
    // A faulty listener must not change the outcome of the request.
  }
}
