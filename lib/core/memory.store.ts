import type { ClaimResult, CompletedRecord, IdempotencyRecord, InProgressRecord } from './record.js';
import type { IdempotencyEventListener } from './events.js';
import type { ClaimRequest, CompleteRequest, IdempotencyStore, StepRequest } from './store.js';
import { ExpiringMap } from './expiring-map.js';
import { StoreEventListeners } from './store-events.js';
import { checkWholeNumber } from './options.js';
import { MemoryOutbox } from './memory-outbox.js';
import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from './outbox-store.js';

export interface MemoryIdempotencyStoreOptions {
  /**
   * Most records kept at once. When full, the oldest completed record is evicted to make
   * room, even before its `ttl`: a retry with its key would then run the handler again,
   * so each such eviction is reported (`evicted_before_expiry` event, and a warning in
   * the module's log). An `in_progress` record is never evicted (that would let a
   * duplicate run while the first is still running), so a store full of running
   * leases refuses new claims instead, which surfaces as a store error (503).
   * @default 10000
   */
  maxEntries?: number;
}

/**
 * The embedded default: a process-local store, O(1) per operation and bounded in
 * size. It protects one process only; use the Redis or TypeORM store when several
 * instances serve the same keys.
 *
 * Two insertion-ordered maps keep eviction O(1): completed records are evicted from
 * the head of theirs, and leases live apart so they are never evicted.
 */
export class MemoryIdempotencyStore implements IdempotencyStore {
  private readonly leases = new ExpiringMap<string, InProgressRecord>((lease) => lease.leaseExpiresAt);
  private readonly completed = new ExpiringMap<string, CompletedRecord>((done) => done.expiresAt);
  /** The step records of each key: apart from the records, as a release must keep them. */
  private readonly steps = new ExpiringMap<string, StepBox>((box) => box.expiresAt);
  readonly maxEntries: number;
  private readonly listeners = new StoreEventListeners();
  /** The messages completed executions staged (IdempotencyOutbox), until a relay sent them. */
  private readonly outbox = new MemoryOutbox();

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    checkWholeNumber('MemoryIdempotencyStore', 'maxEntries', options.maxEntries, { example: '10_000' });
    this.maxEntries = options.maxEntries ?? 10_000;
  }

  /** Number of records held, live or not yet swept. */
  get size(): number {
    return this.leases.size + this.completed.size;
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    const now = Date.now();
    const existing = this.live(key, now);
    if (existing) return { claimed: false, record: existing };
    this.sweepHead(now);
    this.steps.sweep(now, 2);
    if (this.size >= this.maxEntries && !this.evictOneCompleted(now)) {
      throw new Error(
        `MemoryIdempotencyStore is full: all ${this.maxEntries} entries are running leases. Raise maxEntries or lower leaseTtl.`,
      );
    }
    const record: InProgressRecord = {
      status: 'in_progress',
      key,
      leaseToken: request.token,
      leaseExpiresAt: now + request.leaseTtl,
      fingerprint: request.fingerprint,
    };
    this.leases.set(key, record);
    return { claimed: true, record };
  }

  async complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    const now = Date.now();
    const lease = this.ownedLease(key, token, now);
    if (!lease) {
      // A retried complete whose first attempt did land: the same owner, already done.
      const done = this.completed.get(key);
      return done !== undefined && done.leaseToken === token && done.expiresAt > now;
    }
    this.leases.delete(key);
    if (request.outbox) this.outbox.stage(request.outbox, now);
    this.completed.set(key, {
      status: 'completed',
      key,
      result: request.result,
      expiresAt: now + request.ttl,
      fingerprint: lease.fingerprint,
      leaseToken: token,
    });
    return true;
  }

  async release(key: string, token: string): Promise<boolean> {
    const lease = this.leases.get(key);
    if (!lease || lease.leaseToken !== token) return false;
    this.leases.delete(key);
    return true;
  }

  async renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    const now = Date.now();
    const lease = this.ownedLease(key, token, now);
    if (!lease) return false;
    // `set` moves the key to the end, so the map stays in insertion order for sweeping.
    this.leases.set(key, { ...lease, leaseExpiresAt: now + leaseTtl });
    return true;
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    return this.live(key, Date.now());
  }

  async loadSteps(key: string): Promise<Readonly<Record<string, string>>> {
    return { ...this.steps.live(key, Date.now())?.steps };
  }

  async saveStep(key: string, token: string, request: StepRequest): Promise<boolean> {
    const now = Date.now();
    if (!this.ownedLease(key, token, now)) return false;
    const box = this.steps.live(key, now);
    // Bounded like the records: the oldest key's steps go first (its retry would run them again).
    if (!box && this.steps.size >= this.maxEntries) this.steps.deleteOldest();
    const steps = { ...box?.steps, [request.step]: request.result };
    // One expiry per key, pushed back by each write, so the box moves to the end of the map.
    this.steps.set(key, { expiresAt: Math.max(box?.expiresAt ?? 0, now + request.ttl), steps });
    return true;
  }

  async delete(key: string): Promise<boolean> {
    this.steps.delete(key);
    const hadLease = this.leases.delete(key);
    return this.completed.delete(key) || hadLease;
  }

  async ping(): Promise<void> {}

  async claimOutbox(request: OutboxClaimRequest): Promise<readonly ClaimedOutbox[]> {
    return this.outbox.claim(request, Date.now());
  }

  async settleOutbox(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    return this.outbox.settle(id, owner, settlement, Date.now());
  }

  async outboxBacklog(): Promise<OutboxBacklog> {
    return this.outbox.backlog();
  }

  /** Drops every record (tests). */
  clear(): void {
    this.leases.clear();
    this.completed.clear();
    this.steps.clear();
    this.outbox.clear();
  }

  private ownedLease(key: string, token: string, now: number): InProgressRecord | undefined {
    const lease = this.leases.get(key);
    return lease && lease.leaseToken === token && lease.leaseExpiresAt > now ? lease : undefined;
  }

  private live(key: string, now: number): IdempotencyRecord | undefined {
    return this.leases.live(key, now) ?? this.completed.live(key, now);
  }

  /** Bounded work per call: drops a few expired records from the head of each map. */
  private sweepHead(now: number): void {
    this.completed.sweep(now, 2);
    this.leases.sweep(now, 2);
  }

  /** Listeners of `evicted_before_expiry` (IdempotencyModule adds its own). */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.listeners.add(listener);
  }

  private evictOneCompleted(now: number): boolean {
    const evicted = this.completed.deleteOldest();
    if (!evicted) return false;
    if (evicted.expiresAt > now && this.listeners.size > 0) {
      const event = {
        type: 'evicted_before_expiry' as const,
        key: evicted.key,
        at: now,
        durationMs: 0,
        reason: `MemoryIdempotencyStore is full (maxEntries ${this.maxEntries}); the result had ${evicted.expiresAt - now} ms of its ttl left`,
      };
      this.listeners.emit(event);
    }
    return true;
  }
}

/** The finished steps of one key, by step id, and when they all expire. */
interface StepBox {
  readonly expiresAt: number;
  readonly steps: Readonly<Record<string, string>>;
}
