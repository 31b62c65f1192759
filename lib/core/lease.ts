import type { IdempotencyEventType } from './events.js';
import { emitExecutionEvent as emit, type ExecutionPolicy } from './execution.js';
import { serializeOutcome, type StoredOutcome } from './outcome.js';
import { outboxStaged, sealOutbox } from './outbox.js';
import type { StagedOutbox } from './outbox-store.js';
import { closeStepScope, openStepScope, runWithSteps, type OutboxDraft, type StepLedger } from './step-context.js';
import type { IdempotencyStore } from './store.js';
import type { TimerQueue, TimerQueueItem } from './timer-queue.js';

/** What a lease needs of the engine that claimed its key. */
export interface LeaseOwner {
  /** The key's handler runs: local waiters for the key wait for `markSettled`. */
  markRunning(key: string): void;
  /** The key's lease is settled: local waiters are woken. */
  markSettled(key: string): void;
  /** The queue that renews leases every `interval` ms, shared by the engine's leases. */
  renewalsEvery(interval: number): TimerQueue<Lease>;
}

// StepHost is checked where a lease is handed over as one (runWithSteps), not in an
// `implements` clause: its members are internal (stripped from the published .d.ts), which would name an
// interface the lease no longer shows there (skipLibCheck off).
/**
 * Ownership of one claimed key while its handler runs. Renews itself every third of
 * the lease, and is settled once: by `complete`, `fail`, `release` or `abandon`, whichever
 * comes first (later calls do nothing).
 */
export class Lease implements TimerQueueItem {
  /**
   * When the next renewal is due (`performance.now()` ms), while the lease is in its
   * renewal queue. Published (not internal): the types must show what `TimerQueueItem`
   * asks of a lease, or they do not compile without `skipLibCheck`.
   */
  dueAt = 0;
  private readonly renewals: TimerQueue<Lease>;
  private settled = false;
  private lost = false;
  /** The handler runs in the steps' context: a scope of it is open until this lease settles. */
  private inStepScope = false;
  /** Until when the lease is ours as far as this process knows (claim or last successful renew + leaseTtl), epoch ms. */
  private leaseValidUntil: number;
  /** @internal The steps of this execution (step.ts), once its handler called `step()`. */
  stepLedger?: StepLedger;
  /** @internal The messages this execution staged (outbox.ts), stored with its completion. */
  outbox?: OutboxDraft;

  constructor(
    private readonly engine: LeaseOwner,
    readonly key: string,
    readonly token: string,
    /** @internal */
    readonly policy: ExecutionPolicy,
    /** @internal */
    readonly startedAt: number,
    /** The fingerprint the key was claimed with: steps are recorded under it. */
    readonly fingerprint?: string,
  ) {
    this.leaseValidUntil = Date.now() + policy.leaseTtl;
    engine.markRunning(key);
    // One timer per renewal interval for all the leases of the engine, not one per lease:
    // a lease costs every first execution an entry in a Set instead of a timer.
    this.renewals = engine.renewalsEvery(Math.max(1, Math.floor(policy.leaseTtl / 3)));
    this.renewals.add(this);
  }

  /** @internal Called by the renewal queue when a renewal is due. */
  renewNow(): void {
    void this.renew();
  }

  /** True once another worker took the key over; this execution's result will not be stored. */
  get isLost(): boolean {
    return this.lost;
  }

  /** @internal Until when the lease is ours as far as this process knows, epoch ms (see `StepHost.ownedUntil`). */
  get ownedUntil(): number {
    return this.leaseValidUntil;
  }

  /** True once the lease is completed, released or abandoned. */
  get isSettled(): boolean {
    return this.settled;
  }

  /**
   * Runs the handler as this lease's execution: `step()` and `stepKey()` called inside
   * `fn` (and in what it awaits) record under this key, token and fingerprint.
   */
  run<T>(fn: () => T): T {
    if (!this.inStepScope && !this.settled) {
      this.inStepScope = true;
      openStepScope();
    }
    return runWithSteps(this, fn);
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
    const write = new CompleteWrite(this.policy.store, this.key, this.token, result!, this.policy.ttl, 'completed', sealOutbox(this));
    await this.write(write);
  }

  /**
   * The handler threw. Stores `cachedOutcome` when `cacheErrors` selects the error,
   * otherwise releases the key so the client may retry.
   */
  async fail(error: unknown, cachedOutcome: StoredOutcome): Promise<void> {
    if (this.policy.cacheErrors?.(error)) await this.storeError(cachedOutcome);
    else await this.release();
  }

  /**
   * Stores a failure as the answer to replay (an error `cacheErrors` selected), for callers
   * that decided so themselves: the Nest runtime asks about the handler's own error, then
   * stores the error the caller got after the application's interceptors.
   */
  async storeError(cachedOutcome: StoredOutcome): Promise<void> {
    if (!this.finish()) return;
    let result: string;
    try {
      result = serializeOutcome(cachedOutcome);
    } catch {
      result = serializeOutcome({ kind: 'error', error: { name: 'Error', message: 'error not serializable' } });
    }
    await this.write(new CompleteWrite(this.policy.store, this.key, this.token, result, this.policy.ttl, 'error_cached'));
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
    if (this.inStepScope) closeStepScope();
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
    /** The messages the execution staged, stored with the completion (a failed handler stages none). */
    private readonly outbox?: StagedOutbox,
  ) {}

  async send(): Promise<boolean> {
    if (!this.outbox) return this.store.complete(this.key, this.token, { result: this.result, ttl: this.ttl });
    const completed = await this.store.complete(this.key, this.token, { result: this.result, ttl: this.ttl, outbox: this.outbox });
    if (completed) outboxStaged();
    return completed;
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
