import { randomUUID } from 'node:crypto';
import type { ClaimResult, IdempotencyRecord } from '../core/record.js';
import { NearCacheDbIdentity } from './near-cache-db-identity.js';
import type { NearCacheClient, RedisNearCacheStats, ResolvedNearCacheOptions } from './near-cache-options.js';

export {
  DEFAULT_NEAR_CACHE_MAX_AGE,
  DEFAULT_NEAR_CACHE_MAX_BYTES,
  DEFAULT_NEAR_CACHE_MAX_ENTRIES,
  resolveNearCacheOptions,
  type NearCacheClient,
  type RedisNearCacheOptions,
  type RedisNearCacheStats,
  type ResolvedNearCacheOptions,
} from './near-cache-options.js';

/**
 * Counted per entry on top of its strings: the cache entry, the frozen claim result and
 * record objects and the Map slot. Measured with V8 (Node 20, heap growth per entry with
 * `--expose-gc` over 100k entries): 331 bytes; rounded up to 400 for the string headers.
 * The strings themselves are counted at 2 bytes per UTF-16 code unit, which V8 stores in
 * 1 byte when they are Latin-1 (keys, tokens and fingerprints always are).
 */
export const NEAR_CACHE_ENTRY_OVERHEAD = 400;
/** Served no later than this before the record's expiry in Redis, ms, on top of the clock uncertainty. */
const EXPIRY_MARGIN_MS = 100;
/** Extra margin per ms since the clocks were compared: 1 ms per s (1000 ppm, far above real drift). */
const DRIFT_ALLOWANCE = 0.001;
const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;
const PROBE_TTL_MS = 5_000;
/**
 * How often the tracking connection is pinged while the cache answers: a connection that
 * died without a close (a network partition) is noticed within this plus the timeout,
 * not only by `maxAge`.
 */
const HEARTBEAT_MS = 5_000;
/** Every this many heartbeats (5 min), the clocks are compared again, so the drift allowance stays small. */
const CLOCK_EVERY_HEARTBEATS = 60;
const INVALIDATE_CHANNEL = '__redis__:invalidate';

/** The part of an ioredis connection the near cache uses (ioredis 5 and 6 both match). */
interface TrackingConnection {
  readonly status: string;
  connect(): Promise<void>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(reconnect?: boolean): void;
  on(event: string, listener: (...args: never[]) => void): unknown;
  removeAllListeners(event?: string): unknown;
}

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
}

/**
 * Completed records of a `RedisIdempotencyStore` kept in process memory, so a replay
 * costs no round trip, and kept correct across instances by Redis server-assisted
 * client-side caching: one dedicated RESP2 connection, in `CLIENT TRACKING ... BCAST
 * PREFIX <prefix>` mode redirected to itself and subscribed to `__redis__:invalidate`,
 * hears of every write, delete and expiry of a key under the store's prefix, from any
 * instance, and drops that key.
 *
 * Nothing is answered from memory until delivery of those messages is proven on the
 * current connection (a probe key written through the user's client must come back as
 * an invalidation), and any trouble on that connection (error, close, reconnection)
 * switches answering off and empties the cache until it is proven again. A claim that
 * misses registers its key before it is sent: an invalidation of that key (or an
 * emptying of the cache) before its reply is processed keeps that reply out of the
 * cache, as the invalidation may concern a write that Redis ran after the claim.
 * Every entry is also bounded in time: `maxAge` from the claim that read it, and the
 * record's own expiry on the Redis clock (compared with `TIME` when tracking starts,
 * then every 5 minutes).
 *
 * `FLUSHDB` / `FLUSHALL` arrive as an invalidation without a key, which empties the cache
 * and keeps every claim in flight from inserting; Redis sends it just after it answered
 * the flushing client, so until it arrives a flushed record may still be answered (see
 * `sync()`). `SWAPDB` sends nothing: the database's identity (`NearCacheDbIdentity`) is
 * read with every heartbeat, and entries are answered only while the last read that
 * found it unchanged was sent less than a heartbeat plus the timeout ago.
 */
export class NearCache {
  private readonly entries = new Map<string, Entry>();
  private readonly pending = new Map<string, PendingKey>();
  private enabled = false;
  /** Bumped on every enabling, disabling and emptying: a read started in another generation inserts nothing. */
  private generation = 0;
  /**
   * Bumped on every disabling only: what a tracking set-up, heartbeat or sync started
   * under another session no longer applies. An emptying (a flush) is no such event: a
   * proof or heartbeat under way when a flush arrives still counts.
   */
  private session = 0;
  private readonly identity: NearCacheDbIdentity;
  /** `performance.now()` until which the database is known not to be swapped: nothing is answered after it. */
  private identityValidUntil = 0;
  private identityInFlight = false;
  /** Counts invalidations of pending keys: a read inserts only if its key was not invalidated after `since`. */
  private sequence = 0;
  private bytes = 0;
  private hits = 0;
  private misses = 0;
  private invalidations = 0;
  private evictions = 0;
  private started = false;
  private closed = false;
  private connection: TrackingConnection | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private heartbeatInFlight = false;
  private heartbeats = 0;
  private retryDelay = FIRST_RETRY_MS;
  /** Redis epoch ms minus `performance.now()`, and how far off it may be, from `TIME`. */
  private clockOffset = 0;
  private clockUncertainty = 0;
  private clockMeasuredAt = 0;
  private probe: { readonly key: string; readonly seen: () => void } | undefined;
  /** The user's client's ioredis `keyPrefix`, which it puts before every key it sends. */
  private readonly keyPrefix: string;
  /** Redis keys as invalidation messages name them: the client's keyPrefix, then the store's prefix. */
  private readonly trackedPrefix: string;
  /** @internal The dedicated connection's `CLIENT ID` while the cache answers (tests). */
  trackingClientId: number | undefined;
  private readonly probeTimeout: number;

  constructor(
    private readonly client: NearCacheClient,
    private readonly prefix: string,
    private readonly options: ResolvedNearCacheOptions,
    timeout: number,
    private readonly report: (error: unknown, reason: string) => void,
  ) {
    this.keyPrefix = client.options?.keyPrefix ?? '';
    this.trackedPrefix = this.keyPrefix + prefix;
    this.probeTimeout = timeout > 0 ? timeout : 2_000;
    this.identity = new NearCacheDbIdentity(client, prefix);
  }

  /** The cached answer to a claim of `key`, if one may be given without Redis. Starts the cache on first use. */
  lookup(key: string): ClaimResult | undefined {
    const entry = this.entries.get(key);
    if (entry !== undefined) {
      const now = performance.now();
      if (this.enabled && entry.deadline > now && now < this.identityValidUntil) {
        this.hits++;
        return entry.result;
      }
      this.drop(key, entry);
    } else if (!this.started) {
      this.start();
    }
    this.misses++;
    return undefined;
  }

  /** Registers a claim of `key` about to be sent to Redis; undefined when its reply may not be cached anyway. */
  beginRead(key: string): PendingRead | undefined {
    if (!this.enabled) return undefined;
    const pending = this.pending.get(key);
    if (pending) pending.count++;
    else this.pending.set(key, { count: 1, invalidatedAt: 0 });
    return { since: this.sequence, generation: this.generation, startedAt: performance.now() };
  }

  /** The claim registered by `beginRead` is over; caches its reply when it is a completed record nobody invalidated meanwhile. */
  endRead(key: string, read: PendingRead, result: ClaimResult | undefined): void {
    const pending = this.pending.get(key);
    if (!pending) return;
    if (--pending.count === 0) this.pending.delete(key);
    if (result === undefined || result.claimed || result.record.status !== 'completed') return;
    if (!this.enabled || read.generation !== this.generation || pending.invalidatedAt > read.since) return;
    this.insert(key, result.record, read.startedAt);
  }

  /** `key` is about to be deleted through this store: drop it, and keep claims in flight from caching it. */
  forget(key: string): void {
    const entry = this.entries.get(key);
    if (entry) this.drop(key, entry);
    const pending = this.pending.get(key);
    if (pending) pending.invalidatedAt = ++this.sequence;
  }

  stats(): RedisNearCacheStats {
    return {
      enabled: this.enabled,
      entries: this.entries.size,
      bytes: this.bytes,
      hits: this.hits,
      misses: this.misses,
      invalidations: this.invalidations,
      evictions: this.evictions,
    };
  }

  /** Opens the dedicated connection (once); the cache answers once tracking is proven. */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.open();
  }

  /** Closes the dedicated connection for good; the store keeps working without the cache. */
  async close(): Promise<void> {
    this.closed = true;
    this.disable();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopHeartbeat();
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    connection.removeAllListeners('messageBuffer');
    if (connection.status !== 'ready') {
      connection.disconnect();
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        connection.quit(),
        new Promise((resolve) => {
          timer = setTimeout(resolve, this.probeTimeout);
          timer.unref();
        }),
      ]);
    } catch {
      // Closed anyway below.
    } finally {
      clearTimeout(timer);
      connection.disconnect();
    }
  }

  private insert(key: string, record: IdempotencyRecord, startedAt: number): void {
    if (record.status !== 'completed') return;
    const now = performance.now();
    const expiresLocally =
      record.expiresAt -
      this.clockOffset -
      this.clockUncertainty -
      EXPIRY_MARGIN_MS -
      Math.max(0, now - this.clockMeasuredAt) * DRIFT_ALLOWANCE;
    const deadline = Math.min(startedAt + this.options.maxAge, expiresLocally);
    if (!(deadline > now)) return;
    const bytes =
      NEAR_CACHE_ENTRY_OVERHEAD +
      2 * (key.length + record.result.length + (record.fingerprint?.length ?? 0) + (record.leaseToken?.length ?? 0));
    if (bytes > this.options.maxBytes / 8) return;
    const existing = this.entries.get(key);
    if (existing) this.drop(key, existing);
    this.sweepHead(now);
    while (this.entries.size > 0 && (this.entries.size >= this.options.maxEntries || this.bytes + bytes > this.options.maxBytes)) {
      const [oldestKey, oldest] = this.entries.entries().next().value!;
      this.drop(oldestKey, oldest);
      this.evictions++;
    }
    this.entries.set(key, { result: Object.freeze({ claimed: false, record: Object.freeze({ ...record }) }), deadline, bytes });
    this.bytes += bytes;
  }

  /** Drops a few entries past their deadline from the head (bounded work per insert). */
  private sweepHead(now: number): void {
    let budget = 2;
    for (const [key, entry] of this.entries) {
      if (entry.deadline > now || budget-- <= 0) return;
      this.drop(key, entry);
    }
  }

  private drop(key: string, entry: Entry): void {
    if (this.entries.delete(key)) this.bytes -= entry.bytes;
  }

  private clear(): void {
    this.entries.clear();
    this.bytes = 0;
    this.generation++;
  }

  private disable(): void {
    this.enabled = false;
    this.session++;
    this.trackingClientId = undefined;
    this.identityValidUntil = 0;
    this.identity.reset();
    this.clear();
  }

  private open(): void {
    if (this.closed) return;
    const connection = this.client.duplicate!({
      // RESP2: over RESP3, invalidations come as push frames, which ioredis 6 drops.
      protocol: 2,
      autoResubscribe: false,
      lazyConnect: true,
      // Key names in invalidation messages are full Redis keys; this connection sends none.
      keyPrefix: undefined,
      enableOfflineQueue: true,
    }) as TrackingConnection;
    this.connection = connection;
    const lost = () => {
      if (this.connection === connection) this.disable();
    };
    connection.on('close', lost);
    connection.on('reconnecting', lost);
    connection.on('end', () => {
      if (this.connection !== connection) return;
      this.disable();
      // The client's retryStrategy gave up: start over later on a new connection.
      this.reopenLater(connection);
    });
    connection.on('error', (error: unknown) => {
      if (this.connection !== connection) return;
      this.disable();
      this.report(error, 'the near cache connection failed; the cache answers nothing until its invalidations are proven again');
      // Still connected after an error: reconnect, so that tracking is set up and proven again.
      if (connection.status === 'ready') connection.disconnect(true);
    });
    connection.on('ready', () => {
      if (this.connection === connection) void this.track(connection);
    });
    connection.on('messageBuffer', (_channel: unknown, message: unknown) => {
      if (this.connection === connection) this.onInvalidation(message);
    });
    connection.connect().catch(() => {
      // Reported through 'error'; the client's retryStrategy (or reopenLater) tries again.
    });
    this.startHeartbeat(connection);
  }

  /**
   * While the cache answers, every HEARTBEAT_MS: a PING on the tracking connection (no
   * answer within the timeout means the connection is gone) and a read of the database's
   * identity (a SWAPDB sends no invalidation).
   */
  private startHeartbeat(connection: TrackingConnection): void {
    this.stopHeartbeat();
    this.heartbeat = setInterval(() => {
      if (!this.enabled || this.connection !== connection) return;
      const session = this.session;
      void this.checkIdentity(session);
      if (this.heartbeatInFlight) return;
      this.heartbeatInFlight = true;
      if (++this.heartbeats % CLOCK_EVERY_HEARTBEATS === 0) void this.compareClocks(session);
      this.ping(connection, session).finally(() => {
        this.heartbeatInFlight = false;
      });
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /**
   * A PING on the tracking connection. Redis answers it after every invalidation it queued
   * to that connection before, and the client handles replies in order, so once it
   * resolves, those invalidations have been applied. Unanswered within the timeout, or
   * failed: the connection is taken as lost (switched off, emptied, reconnected).
   */
  private async ping(connection: TrackingConnection, session: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the near cache connection did not answer PING within ${this.probeTimeout} ms`)),
        this.probeTimeout,
      );
      timer.unref();
    });
    try {
      await Promise.race([connection.call('PING'), late]);
    } catch (error) {
      if (this.connection !== connection || this.session !== session || this.closed) return;
      this.disable();
      this.report(error, 'the near cache connection stopped answering; the cache answers nothing until it is reconnected and proven again');
      connection.disconnect(true);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Reads the database's identity through the user's client: changed (a SWAPDB, or a
   * flush whose invalidation has not arrived) empties the cache; unchanged lets entries be
   * answered for a heartbeat plus the timeout after the read was sent, time for the next
   * read to come back. A failed read extends nothing, so answering stops when that runs
   * out. Returns false when the read failed.
   */
  private async checkIdentity(session: number, force = false): Promise<boolean> {
    // One heartbeat read at a time; a sync() sends its own, as it must be sent after the call.
    if (this.identityInFlight && !force) return true;
    if (!force) this.identityInFlight = true;
    const sentAt = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('the identity read did not answer in time')), this.probeTimeout);
        timer.unref();
      });
      const verdict = await Promise.race([this.identity.read(), late]);
      if (this.session !== session || verdict === 'outdated') return true;
      if (verdict === 'changed') this.clear();
      this.identityValidUntil = Math.max(this.identityValidUntil, sentAt + HEARTBEAT_MS + this.probeTimeout);
      return true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      if (!force) this.identityInFlight = false;
    }
  }

  /**
   * Resolves once the cache reflects every write, delete, flush and SWAPDB that Redis ran
   * before the call: a PING on the tracking connection (see `ping`) and a read of the
   * database's identity, sent together. What cannot be confirmed is dropped: a failed
   * PING switches the cache off, a failed identity read empties it. Never rejects.
   */
  async sync(): Promise<void> {
    const connection = this.connection;
    if (!this.enabled || connection === undefined) return;
    const session = this.session;
    const [, confirmed] = await Promise.all([this.ping(connection, session), this.checkIdentity(session, true)]);
    if (!confirmed && this.session === session) this.clear();
  }

  /**
   * `TIME` through the user's client (the tracking connection, subscribed over RESP2,
   * cannot send it): a new offset and measurement time, or nothing if it fails (the
   * drift allowance keeps growing meanwhile, which only shortens deadlines).
   */
  private async compareClocks(session: number): Promise<void> {
    try {
      const before = performance.now();
      const time = (await this.client.eval(`return redis.call('TIME')`, 0)) as unknown[];
      const after = performance.now();
      if (this.session !== session || after - before > this.probeTimeout) return;
      this.setClock(time, before, after);
    } catch {
      // The next comparison, or the next connection, measures again.
    }
  }

  private setClock(time: unknown[], before: number, after: number): void {
    const redisNow = Number(String(time[0])) * 1_000 + Math.floor(Number(String(time[1])) / 1_000);
    this.clockOffset = redisNow - (before + after) / 2;
    this.clockUncertainty = (after - before) / 2 + 1;
    this.clockMeasuredAt = after;
  }

  private stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    this.heartbeatInFlight = false;
  }

  private reopenLater(connection: TrackingConnection): void {
    if (this.closed || this.retryTimer) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(MAX_RETRY_MS, this.retryDelay * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.closed || this.connection !== connection) return;
      this.stopHeartbeat();
      connection.removeAllListeners();
      connection.on('error', () => undefined);
      connection.disconnect();
      this.open();
    }, delay);
    this.retryTimer.unref();
  }

  /** On every `ready`: tracking on, subscribed, clocks compared, delivery proven; then answering starts. */
  private async track(connection: TrackingConnection): Promise<void> {
    this.disable();
    const session = this.session;
    const current = () => this.connection === connection && this.session === session && !this.closed;
    try {
      const id = Number(await connection.call('CLIENT', 'ID'));
      const before = performance.now();
      const time = (await connection.call('TIME')) as unknown[];
      const after = performance.now();
      const prefixArgs = this.trackedPrefix === '' ? [] : ['PREFIX', this.trackedPrefix];
      await connection.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', id, 'BCAST', ...prefixArgs);
      await connection.subscribe(INVALIDATE_CHANNEL);
      if (!current()) return;
      await this.proveDelivery(current);
      if (!current()) return;
      // The database the cache is filled from, known before anything is cached.
      const sentAt = performance.now();
      await this.identity.read();
      if (!current()) return;
      this.identityValidUntil = sentAt + HEARTBEAT_MS + this.probeTimeout;
      this.setClock(time, before, after);
      this.trackingClientId = id;
      this.retryDelay = FIRST_RETRY_MS;
      this.generation++;
      this.enabled = true;
    } catch (error) {
      if (!current()) return;
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(connection);
    }
  }

  /**
   * Writes a probe key under the prefix through the user's client and waits for its
   * invalidation: proof that this connection hears the writes of every connection.
   */
  private async proveDelivery(current: () => boolean): Promise<void> {
    const key = `${this.prefix}__near-cache-probe__:${randomUUID()}`;
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<void>((resolve, reject) => {
      this.probe = { key: this.keyPrefix + key, seen: resolve };
      timer = setTimeout(
        () => reject(new Error(`Redis's invalidation of the probe key did not arrive within ${this.probeTimeout} ms`)),
        this.probeTimeout,
      );
      timer.unref();
    });
    try {
      await this.client.eval(`return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])`, 1, key, PROBE_TTL_MS);
      if (!current()) return;
      await seen;
    } finally {
      clearTimeout(timer);
      this.probe = undefined;
      this.client.eval(`return redis.call('DEL', KEYS[1])`, 1, key).catch(() => undefined);
    }
  }

  private onInvalidation(message: unknown): void {
    if (message === null || message === undefined || (Array.isArray(message) && message.length === 0)) {
      this.invalidations++;
      this.invalidateAll();
      return;
    }
    if (!Array.isArray(message)) {
      this.invalidateKey(message);
      return;
    }
    for (const key of message) this.invalidateKey(key);
  }

  private invalidateKey(raw: unknown): void {
    this.invalidations++;
    if (raw === null || raw === undefined) return this.invalidateAll();
    const redisKey = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw);
    if (redisKey === '') return this.invalidateAll();
    if (this.probe !== undefined && redisKey === this.probe.key) this.probe.seen();
    // `<keyPrefix><prefix>{<key>}`: anything else under the prefix is not a record.
    if (!redisKey.startsWith(this.trackedPrefix) || redisKey.charCodeAt(redisKey.length - 1) !== 125 /* } */) return;
    if (redisKey.charCodeAt(this.trackedPrefix.length) !== 123 /* { */) return;
    const key = redisKey.slice(this.trackedPrefix.length + 1, -1);
    const entry = this.entries.get(key);
    if (entry) this.drop(key, entry);
    const pending = this.pending.get(key);
    if (pending) pending.invalidatedAt = ++this.sequence;
  }

  /** FLUSHDB / FLUSHALL (a null payload): everything goes, and no read in flight may insert. */
  private invalidateAll(): void {
    this.clear();
  }
}
