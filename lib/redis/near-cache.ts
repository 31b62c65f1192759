import type { ClaimResult, IdempotencyRecord } from '../core/record.js';
import { SizedExpiringMap } from '../core/expiring-map.js';
import type { NearCacheClient } from './near-cache-connection.js';
import type { NearCacheTrackingMode, RedisNearCacheStats, ResolvedNearCacheOptions } from './near-cache-options.js';
import { NearCacheTracking, type TrackedCache } from './near-cache-tracking.js';

/**
 * Counted per entry on top of its strings: the cache entry, the frozen claim result and
 * record objects and the Map slot. Measured with V8 (Node 20, heap growth per entry with
 * `--expose-gc` over 100k entries): 331 bytes; rounded up to 400 for the string headers.
 * The strings themselves are counted at 2 bytes per UTF-16 code unit, which V8 stores in
 * 1 byte when they are Latin-1 (keys, tokens and fingerprints always are).
 */
const NEAR_CACHE_ENTRY_OVERHEAD = 400;

interface Entry {
  readonly result: ClaimResult;
  /** `performance.now()` after which the entry is not answered. */
  readonly deadline: number;
  readonly bytes: number;
}

/** The claims of one key in flight, and the last invalidation of that key meanwhile. */
interface PendingKey {
  count: number;
  invalidatedAt: number;
}

/** One claim sent to Redis after a miss: what it may insert when its reply comes back. */
export interface PendingRead {
  readonly since: number;
  readonly generation: number;
  readonly startedAt: number;
  /**
   * Send it with `RedisScriptRunner.runTracked` (`CLIENT CACHING yes` first), and insert
   * its reply only if Redis accepted the CACHING: in `'client'` tracking mode, Redis tells
   * of changes only to keys read that way.
   */
  readonly tracked: boolean;
}

/**
 * Completed records of a `RedisIdempotencyStore` kept in process memory, so a replay
 * costs no round trip, and kept correct across instances by Redis server-assisted
 * client-side caching: the tracking connection (`NearCacheTracking`) hears of every
 * write, delete and expiry of a cached key, by any instance, and this cache drops that
 * key. In `'client'` mode Redis tracks only the keys read by tracked claims (a key's
 * claim after one that found it completed, `noteCompleted`); in `'broadcast'` mode it
 * reports every key under the store's prefix, and any claim may fill the cache.
 *
 * Nothing is answered from memory until the tracking connection has proven delivery of
 * those messages, and any trouble on that connection switches answering off and empties
 * the cache until it is proven again. A claim that misses registers its key before it is
 * sent: an invalidation of that key (or an emptying of the cache) before its reply is
 * processed keeps that reply out of the cache, as the invalidation may concern a write
 * that Redis ran after the claim. Every entry is also bounded in time: `maxAge` from the
 * claim that read it, and the record's own expiry on the Redis clock.
 *
 * `FLUSHDB` / `FLUSHALL` arrive as an invalidation without a key, which empties the cache
 * and keeps every claim in flight from inserting; Redis sends it just after it answered
 * the flushing client, so until it arrives a flushed record may still be answered (see
 * `sync()`). `SWAPDB` sends nothing: the database's identity is read with every
 * heartbeat, and entries are answered only while the last read that found it unchanged
 * was sent less than a heartbeat plus the timeout ago.
 *
 * The entries are an `ExpiringMap` (oldest first, swept and evicted from the head) that
 * counts their bytes, bounded by `maxEntries` and `maxBytes`.
 */
export class NearCache implements TrackedCache {
  private readonly entries = new SizedExpiringMap<string, Entry>(
    (entry) => entry.deadline,
    (entry) => entry.bytes,
  );
  private readonly pending = new Map<string, PendingKey>();
  /**
   * `'client'` mode: keys whose last claim here found them completed, oldest first, up to
   * `maxEntries`. Only the next claim of such a key is sent tracked and may be cached, so a
   * first execution (its claim and completion) leaves no tracked key in Redis and costs
   * no invalidation; a key is cached from its second replay on.
   */
  private readonly candidates = new Set<string>();
  enabled = false;
  /** How the invalidations arrive while the cache answers. */
  mode: NearCacheTrackingMode | undefined;
  /** Bumped on every enabling, disabling and emptying: a read started in another generation inserts nothing. */
  private generation = 0;
  /** `performance.now()` until which the database is known not to be swapped: nothing is answered after it. */
  private identityValidUntil = 0;
  /** Counts invalidations of pending keys: a read inserts only if its key was not invalidated after `since`. */
  private sequence = 0;
  private hits = 0;
  private misses = 0;
  private evictions = 0;
  private started = false;
  private readonly tracking: NearCacheTracking;

  constructor(
    client: NearCacheClient,
    prefix: string,
    private readonly options: ResolvedNearCacheOptions,
    timeout: number,
    report: (error: unknown, reason: string) => void,
  ) {
    this.tracking = new NearCacheTracking(client, prefix, this, timeout, report);
  }

  /** @internal The dedicated connection's `CLIENT ID` while the cache answers (tests). */
  get trackingClientId(): number | undefined {
    return this.tracking.clientId;
  }

  /** Whether `entry` may be answered now: the cache on, the entry within its retention, the database's identity fresh. */
  private answers(entry: Entry | undefined): entry is Entry {
    if (entry === undefined) return false;
    const now = performance.now();
    return this.enabled && entry.deadline > now && now < this.identityValidUntil;
  }

  /** Whether lookup(key) would answer now; nothing counted, nothing started. */
  holds(key: string): boolean {
    return this.answers(this.entries.get(key));
  }

  /** The cached answer to a claim of `key`, if one may be given without Redis. Starts the cache on first use. */
  lookup(key: string): ClaimResult | undefined {
    const entry = this.entries.get(key);
    if (this.answers(entry)) {
      this.hits++;
      return entry.result;
    }
    if (entry !== undefined) {
      this.entries.delete(key);
    } else if (!this.started) {
      this.start();
    }
    this.misses++;
    return undefined;
  }

  /** Registers a claim of `key` about to be sent to Redis; undefined when its reply may not be cached anyway. */
  beginRead(key: string): PendingRead | undefined {
    if (!this.enabled) return undefined;
    const tracked = this.mode === 'client';
    if (tracked && !this.candidates.has(key)) return undefined;
    const pending = this.pending.get(key);
    if (pending) pending.count++;
    else this.pending.set(key, { count: 1, invalidatedAt: 0 });
    return { since: this.sequence, generation: this.generation, startedAt: performance.now(), tracked };
  }

  /** An untracked claim (no `beginRead`) found `key` completed: its next claim is sent tracked (`'client'` mode). */
  noteCompleted(key: string): void {
    if (!this.enabled || this.mode !== 'client') return;
    const candidates = this.candidates;
    candidates.delete(key);
    candidates.add(key);
    if (candidates.size > this.options.maxEntries) candidates.delete(candidates.values().next().value!);
  }

  /**
   * The claim registered by `beginRead` is over; caches its reply when it is a completed
   * record nobody invalidated meanwhile (and, for a tracked read, whose `CLIENT CACHING`
   * Redis accepted: `cachingAccepted`).
   */
  endRead(key: string, read: PendingRead, result: ClaimResult | undefined, cachingAccepted = false): void {
    const pending = this.pending.get(key);
    if (!pending) return;
    if (--pending.count === 0) this.pending.delete(key);
    if (read.tracked) this.candidates.delete(key);
    if ((read.tracked && !cachingAccepted) || result === undefined || result.claimed || result.record.status !== 'completed') return;
    if (!this.enabled || read.generation !== this.generation || pending.invalidatedAt > read.since) return;
    this.insert(key, result.record, read.startedAt);
  }

  /** `key` is about to be deleted through this store: drop it, and keep claims in flight from caching it. */
  forget(key: string): void {
    this.invalidate(key);
  }

  stats(): RedisNearCacheStats {
    return {
      enabled: this.enabled,
      entries: this.entries.size,
      bytes: this.entries.totalSize,
      hits: this.hits,
      misses: this.misses,
      invalidations: this.tracking.invalidations,
      evictions: this.evictions,
      tracking: this.enabled ? this.mode : undefined,
    };
  }

  /** Opens the dedicated connection (once); the cache answers once tracking is proven. */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.tracking.start();
  }

  /** Closes the dedicated connection for good; the store keeps working without the cache. */
  close(): Promise<void> {
    return this.tracking.close();
  }

  /** Resolves once the cache reflects every write, delete, flush and SWAPDB that Redis ran before the call (`NearCacheTracking.sync`). */
  sync(): Promise<void> {
    return this.tracking.sync();
  }

  enable(identityValidUntil: number, mode: NearCacheTrackingMode): void {
    this.identityValidUntil = identityValidUntil;
    this.mode = mode;
    this.generation++;
    this.enabled = true;
  }

  disable(): void {
    this.enabled = false;
    this.identityValidUntil = 0;
    this.clear();
  }

  clear(): void {
    this.entries.clear();
    this.candidates.clear();
    this.generation++;
  }

  extendIdentity(until: number): void {
    this.identityValidUntil = Math.max(this.identityValidUntil, until);
  }

  invalidate(key: string): void {
    this.entries.delete(key);
    const pending = this.pending.get(key);
    if (pending) pending.invalidatedAt = ++this.sequence;
  }

  private insert(key: string, record: IdempotencyRecord, startedAt: number): void {
    if (record.status !== 'completed') return;
    const now = performance.now();
    const deadline = Math.min(startedAt + this.options.maxAge, this.tracking.clock.localExpiry(record.expiresAt, now));
    if (!(deadline > now)) return;
    const bytes =
      NEAR_CACHE_ENTRY_OVERHEAD +
      2 * (key.length + record.result.length + (record.fingerprint?.length ?? 0) + (record.leaseToken?.length ?? 0));
    if (bytes > this.options.maxBytes / 8) return;
    const entries = this.entries;
    entries.delete(key);
    // A few entries past their deadline go from the head (bounded work per insert), then the oldest while over a bound.
    entries.sweep(now, 2);
    while (entries.size > 0 && (entries.size >= this.options.maxEntries || entries.totalSize + bytes > this.options.maxBytes)) {
      entries.deleteOldest();
      this.evictions++;
    }
    entries.set(key, { result: Object.freeze({ claimed: false, record: Object.freeze({ ...record }) }), deadline, bytes });
  }
}
