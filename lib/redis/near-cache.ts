import { randomUUID } from 'node:crypto';
import { IdempotencyConfigurationError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type { ClaimResult, IdempotencyRecord } from '../core/record.js';

/**
 * Options of the near cache of `RedisIdempotencyStore` (see the store's `nearCache`
 * option and docs/redis.md, "Near cache").
 */
export interface RedisNearCacheOptions {
  /**
   * Most completed records kept in process memory; past it the oldest inserted is dropped.
   * @default 10_000
   */
  maxEntries?: number;
  /**
   * Most memory the cached records may take, in bytes, counted as 2 bytes per UTF-16 code
   * unit of every string of a record (key, result, fingerprint, lease token) plus a fixed
   * 400 bytes per entry; past it the oldest inserted is dropped. A record counted above
   * an eighth of this bound is not cached at all.
   * @default 16 * 1024 * 1024 (16 MiB)
   */
  maxBytes?: number;
  /**
   * Longest time a cached record may be answered without asking Redis, in ms, counted
   * from the claim that read it. The bound on staleness should invalidation messages
   * ever stop arriving unnoticed.
   * @default 60_000
   */
  maxAge?: number;
}

/** What the near cache of a `RedisIdempotencyStore` holds and did (`nearCacheStats()`). */
export interface RedisNearCacheStats {
  /** True while Redis's invalidation messages are proven to arrive, so cached records are answered. */
  readonly enabled: boolean;
  /** Completed records held now. */
  readonly entries: number;
  /** Their counted size (see `RedisNearCacheOptions.maxBytes`). */
  readonly bytes: number;
  /** Claims answered from process memory. */
  readonly hits: number;
  /** Claims that went to Redis. */
  readonly misses: number;
  /** Invalidation notices received: one per key written under the prefix, by any instance. */
  readonly invalidations: number;
  /** Records dropped to stay within `maxEntries` or `maxBytes`. */
  readonly evictions: number;
}

export const DEFAULT_NEAR_CACHE_MAX_ENTRIES = 10_000;
export const DEFAULT_NEAR_CACHE_MAX_BYTES = 16 * 1024 * 1024;
export const DEFAULT_NEAR_CACHE_MAX_AGE = 60_000;
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

/** The user's client as the near cache needs it. */
export interface NearCacheClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  duplicate?(override?: Record<string, unknown>): unknown;
  readonly isCluster?: boolean;
  readonly options?: { readonly keyPrefix?: string };
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

export interface ResolvedNearCacheOptions {
  readonly maxEntries: number;
  readonly maxBytes: number;
  readonly maxAge: number;
}

const OWNER = 'RedisIdempotencyStore';

/** Checks the `nearCache` option; undefined when the cache is off. */
export function resolveNearCacheOptions(
  option: boolean | RedisNearCacheOptions | undefined,
  client: NearCacheClient,
): ResolvedNearCacheOptions | undefined {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== 'object' || option === null || Array.isArray(option))) {
    throw new IdempotencyConfigurationError(
      `${OWNER}: nearCache must be true, false or an options object, got ${String(option)}.`,
      'Write nearCache: true, or nearCache: { maxEntries: 10_000, maxBytes: 16 * 1024 * 1024, maxAge: 60_000 }.',
    );
  }
  const options: RedisNearCacheOptions = option === true ? {} : option;
  checkWholeNumber(OWNER, 'nearCache.maxEntries', options.maxEntries, { example: '10_000' });
  checkWholeNumber(OWNER, 'nearCache.maxBytes', options.maxBytes, { example: '16 * 1024 * 1024' });
  checkWholeNumber(OWNER, 'nearCache.maxAge', options.maxAge, { unit: 'ms', example: '60_000' });
  if (client.isCluster === true) {
    throw new IdempotencyConfigurationError(
      `${OWNER}: nearCache is not available with a Redis Cluster client.`,
      'Invalidation tracking is per node and is not built for Cluster: remove the nearCache option, or use a standalone (or Sentinel) client.',
    );
  }
  if (typeof client.duplicate !== 'function') {
    throw new IdempotencyConfigurationError(
      `${OWNER}: nearCache needs a client with duplicate(), to open its own connection for Redis's invalidation messages.`,
      'Pass an ioredis 5 or 6 Redis client (new Redis(...)), or remove the nearCache option.',
    );
  }
  return {
    maxEntries: options.maxEntries ?? DEFAULT_NEAR_CACHE_MAX_ENTRIES,
    maxBytes: options.maxBytes ?? DEFAULT_NEAR_CACHE_MAX_BYTES,
    maxAge: options.maxAge ?? DEFAULT_NEAR_CACHE_MAX_AGE,
  };
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
 */
export class NearCache {
  private readonly entries = new Map<string, Entry>();
  private readonly pending = new Map<string, PendingKey>();
  private enabled = false;
  /** Bumped on every enabling, disabling and emptying: a read started in another generation inserts nothing. */
  private generation = 0;
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
  }

  /** The cached answer to a claim of `key`, if one may be given without Redis. Starts the cache on first use. */
  lookup(key: string): ClaimResult | undefined {
    const entry = this.entries.get(key);
    if (entry !== undefined) {
      if (this.enabled && entry.deadline > performance.now()) {
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
    this.trackingClientId = undefined;
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

  /** While the cache answers, a PING every HEARTBEAT_MS; no answer within the timeout means the connection is gone. */
  private startHeartbeat(connection: TrackingConnection): void {
    this.stopHeartbeat();
    this.heartbeat = setInterval(() => {
      if (!this.enabled || this.heartbeatInFlight || this.connection !== connection) return;
      this.heartbeatInFlight = true;
      const generation = this.generation;
      if (++this.heartbeats % CLOCK_EVERY_HEARTBEATS === 0) void this.compareClocks(generation);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the near cache connection did not answer PING within ${this.probeTimeout} ms`)),
          this.probeTimeout,
        );
        timer.unref();
      });
      Promise.race([connection.call('PING'), late])
        .catch((error: unknown) => {
          if (this.connection !== connection || this.generation !== generation || this.closed) return;
          this.disable();
          this.report(
            error,
            'the near cache connection stopped answering; the cache answers nothing until it is reconnected and proven again',
          );
          connection.disconnect(true);
        })
        .finally(() => {
          clearTimeout(timer);
          this.heartbeatInFlight = false;
        });
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /**
   * `TIME` through the user's client (the tracking connection, subscribed over RESP2,
   * cannot send it): a new offset and measurement time, or nothing if it fails (the
   * drift allowance keeps growing meanwhile, which only shortens deadlines).
   */
  private async compareClocks(generation: number): Promise<void> {
    try {
      const before = performance.now();
      const time = (await this.client.eval(`return redis.call('TIME')`, 0)) as unknown[];
      const after = performance.now();
      if (this.generation !== generation || after - before > this.probeTimeout) return;
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
    const generation = this.generation;
    const current = () => this.connection === connection && this.generation === generation && !this.closed;
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
