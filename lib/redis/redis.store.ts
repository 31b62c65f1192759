import type { IdempotencyEvent, IdempotencyEventListener } from '../core/events.js';
import type { ClaimResult, CompletedRecord, IdempotencyRecord } from '../core/record.js';
import type { ClaimRequest, CompleteRequest, IdempotencyStore, StepRequest } from '../core/store.js';
import { DELETE_WITH_STEPS, loadSteps, saveStep } from './redis-steps.js';
import { resolveNearCacheOptions, type RedisNearCacheOptions, type RedisNearCacheStats } from './near-cache-options.js';
import type { NearCacheClient } from './near-cache-connection.js';
import type { NodeRedisClientLike } from './node-redis-client.js';
import { awaitReady } from './redis-ready.js';
import { NearCache, type PendingRead } from './near-cache.js';
import {
  DEFAULT_REDIS_READY_TIMEOUT,
  RedisScriptRunner,
  asString,
  isAbsent,
  wholeMs,
  type RedisCallOptions,
  type RedisClientLike,
} from './redis-client.js';
import { CLAIM, COMPLETE, GET, RELEASE, RENEW } from './redis-record-scripts.js';
import { outboxUnavailableError, resolveRedisOutbox, RedisOutbox, type RedisOutboxUnavailable } from './redis-outbox.js';
import type { ClaimedOutbox, IdempotencyOutboxStore, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../core/outbox-store.js';
import { checkWholeNumber } from '../core/options.js';
import { RateLimitedLog } from '../observability/rate-limited-log.js';
import { StoreEventListeners } from '../core/store-events.js';

/** Options of `RedisIdempotencyStore`. */
export interface RedisIdempotencyStoreOptions extends RedisCallOptions {
  /**
   * Prepended to every key. Give each application (or test run) its own, so that two
   * apps sharing one Redis never see each other's records.
   * @default 'idempotency:'
   */
  prefix?: string;
  /**
   * Keeps completed records in process memory, so that a replay costs no Redis round
   * trip; Redis's invalidation messages (client-side caching: `OPTIN` tracking on the
   * client passed in, or `BCAST` on the cache's own connection, see
   * `RedisNearCacheStats.tracking`) drop a record here as soon as any instance deletes
   * it or it expires. A record is cached from its second replay on this instance.
   * Costs one extra connection per store, opened on the first claim (or `verify()`) and
   * closed by `close()`. Refused with a Cluster client. `true` takes the defaults of
   * `RedisNearCacheOptions`. See docs/redis.md, "Near cache".
   * @default false
   */
  nearCache?: boolean | RedisNearCacheOptions;
  /**
   * Longest wait at boot (`verify()`, which `IdempotencyModule` calls during `app.init()`)
   * for a client that is still connecting, ms: the application reports ready once the
   * client is, so the first events, ticks and requests are protected even without an
   * offline queue (`recommendedRedisOptions()`). A `lazyConnect` client is connected
   * then. A client not ready by then (a wrong URL, Redis down) stops the boot with an
   * `IdempotencyConfigurationError`. 0: do not wait (commands fail as an outage until
   * the client is ready).
   * @default 10000
   */
  readyTimeout?: number;
  /**
   * The transactional outbox (`IdempotencyOutbox`, docs/outbox.md): the messages an
   * execution staged are written by the script that completes its record (keys
   * `<prefix>outbox:*`), and a relay in every instance sends them. The record and the
   * outbox must be in one hash slot: with a Cluster client, only a `prefix` with a hash tag
   * of its own (`'{orders-outbox}:idem:'`, every key of the store then in that slot, on
   * one master) has an outbox, and `true` with an untagged prefix is refused when the
   * store is created. `false` turns it off (no relay polls this store, `emit()` on it is refused).
   * @default true, except with a Cluster client and a prefix without a hash tag
   */
  outbox?: boolean;
}

/**
 * An `IdempotencyStore` on Redis through ioredis (5 or 6), standalone or Cluster.
 * Every primitive is one Lua script, so a first execution costs two round trips
 * (claim, complete) and a replay one (the claim answers with the completed record).
 *
 * Timestamps (`leaseExpiresAt`, `expiresAt`) come from the Redis server clock; the
 * expiry itself is Redis's own key expiry, so clock skew between app instances never
 * lets two of them own one key.
 *
 * @example
 * const redis = new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 1000 });
 * IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(redis, { prefix: 'orders-api:idem:' }) });
 */
export class RedisIdempotencyStore implements IdempotencyStore, IdempotencyOutboxStore {
  readonly prefix: string;
  private readonly scripts: RedisScriptRunner;
  private readonly nearCache: NearCache | undefined;
  private readonly listeners = new StoreEventListeners();
  private fallbackLog: RateLimitedLog | undefined;
  private readonly readyTimeout: number;
  /** The outbox (redis-outbox.ts), or why this store has none. */
  private readonly outbox: RedisOutbox | RedisOutboxUnavailable;

  constructor(client: RedisClientLike | NodeRedisClientLike, options: RedisIdempotencyStoreOptions = {}) {
    this.scripts = new RedisScriptRunner(client, options, 'RedisIdempotencyStore');
    // ioredis as it is, node-redis adapted: the near cache drives either the same way.
    const adapted = this.scripts.client as NearCacheClient;
    this.prefix = options.prefix ?? 'idempotency:';
    checkWholeNumber('RedisIdempotencyStore', 'readyTimeout', options.readyTimeout, { unit: 'ms', min: 0, example: '10_000' });
    this.readyTimeout = options.readyTimeout ?? DEFAULT_REDIS_READY_TIMEOUT;
    this.outbox = resolveRedisOutbox(options.outbox, this.scripts, this.prefix);
    const nearCache = resolveNearCacheOptions(options.nearCache, adapted);
    this.nearCache =
      nearCache &&
      new NearCache(adapted, this.prefix, nearCache, this.scripts.timeout, (error, reason) => this.reportNearCacheError(error, reason));
    // A connection the watchdog dropped (connection-watchdog.ts) is told, like a store error.
    this.scripts.watchdog?.onDrop((reason) => this.reportNearCacheError(new Error(reason), reason, 'connection'));
  }

  /** The Redis key of a store key. The braces are a Cluster hash tag over the whole key. */
  redisKey(key: string): string {
    return `${this.prefix}{${key}}`;
  }

  claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    const nearCache = this.nearCache;
    if (nearCache === undefined) return this.claimInRedis(key, request);
    // An invalid leaseTtl is refused below, as without the cache.
    if (Number.isSafeInteger(request.leaseTtl) && request.leaseTtl >= 1) {
      if (nearCache.holds(key)) return this.claimAfterPendingInvalidations(nearCache, key, request);
      nearCache.lookup(key); // a miss: counted, and the cache started on first use
    }
    return this.claimPastNearCache(nearCache, key, request);
  }

  /**
   * A claim the near cache could answer, answered one turn of the event loop later: by
   * then every invalidation already readable on the cache's connection has been applied.
   * Redis sends the invalidation of a delete before the deleting client's `forget()`
   * resolves (redis-store delete: a PING after it), so it is readable here before any
   * request sent after that `forget()`; but a busy process handles the I/O it finds ready
   * in no set order, and answered such a request from memory before reading the
   * invalidation beside it (2 stale replays in 100 rounds with the CPU saturated,
   * test/reliability/invariant.redis-near-cache.spec.ts). The turn costs no Redis call.
   */
  private async claimAfterPendingInvalidations(nearCache: NearCache, key: string, request: ClaimRequest): Promise<ClaimResult> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    return nearCache.lookup(key) ?? this.claimPastNearCache(nearCache, key, request);
  }

  private claimPastNearCache(nearCache: NearCache, key: string, request: ClaimRequest): Promise<ClaimResult> {
    // Registered before the script is sent: an invalidation of this key that arrives on
    // the other connection before this reply keeps the reply out of the cache.
    const read = nearCache.beginRead(key);
    if (read === undefined) return this.claimInRedis(key, request, nearCache);
    return this.claimThroughNearCache(nearCache, key, request, read);
  }

  private async claimThroughNearCache(nearCache: NearCache, key: string, request: ClaimRequest, read: PendingRead): Promise<ClaimResult> {
    let result: ClaimResult | undefined;
    let cachingAccepted = false;
    try {
      if (read.tracked) {
        const tracked = await this.scripts.runTracked(CLAIM, this.redisKey(key), this.claimArgs(request));
        cachingAccepted = tracked.tracked;
        result = this.claimResult(key, request, tracked.reply as unknown[]);
      } else {
        result = await this.claimInRedis(key, request);
      }
      return result;
    } finally {
      nearCache.endRead(key, read, result, cachingAccepted);
    }
  }

  /**
   * The claim script, its reply not cached. `nearCache`: an untracked claim of the near
   * cache (a first execution, mostly), which tells it of a completed record found, so
   * the key's next claim is sent tracked; one async step, as without the cache.
   */
  private async claimInRedis(key: string, request: ClaimRequest, nearCache?: NearCache): Promise<ClaimResult> {
    const reply = (await this.scripts.run(CLAIM, this.redisKey(key), this.claimArgs(request))) as unknown[];
    const result = this.claimResult(key, request, reply);
    if (nearCache && !result.claimed && result.record.status === 'completed') nearCache.noteCompleted(key);
    return result;
  }

  private claimArgs(request: ClaimRequest): (string | number)[] {
    const leaseTtl = wholeMs(request.leaseTtl, 'leaseTtl', 'RedisIdempotencyStore.claim');
    const hasFingerprint = request.fingerprint !== undefined;
    return [request.token, leaseTtl, hasFingerprint ? '1' : '0', hasFingerprint ? request.fingerprint! : ''];
  }

  private claimResult(key: string, request: ClaimRequest, reply: unknown[]): ClaimResult {
    if (Number(reply[0]) === 1) {
      return {
        claimed: true,
        record: withFingerprint(
          { status: 'in_progress', key, leaseToken: request.token, leaseExpiresAt: Number(asString(reply[1])) },
          request.fingerprint,
        ),
      };
    }
    return { claimed: false, record: toRecord(key, reply.slice(1))! };
  }

  async complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    const ttl = wholeMs(request.ttl, 'ttl', 'RedisIdempotencyStore.complete');
    if (request.outbox) return this.outboxOrThrow().completeAndStage(this.redisKey(key), token, request.result, ttl, request.outbox);
    return Number(await this.scripts.run(COMPLETE, this.redisKey(key), [token, request.result, ttl])) === 1;
  }

  /** Outbox (`IdempotencyOutbox`): claims due executions for a relay, earliest first, during `claimTtl`. */
  async claimOutbox(request: OutboxClaimRequest): Promise<readonly ClaimedOutbox[]> {
    return this.outboxOrThrow().claim(request);
  }

  /** Outbox: records what a relay sent of a claimed execution and ends its claim. */
  async settleOutbox(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    return this.outboxOrThrow().settle(id, owner, settlement);
  }

  /** Outbox: what waits to be sent. */
  async outboxBacklog(): Promise<OutboxBacklog> {
    return this.outboxOrThrow().backlog();
  }

  /** Outbox: deletes up to `limit` executions sent more than `retention` ms ago (the relays call it). */
  async purgeOutbox(retention: number, limit: number): Promise<number> {
    return this.outboxOrThrow().purgeSent(retention, limit);
  }

  /** Outbox: false with `outbox: false`, or a Cluster client and an untagged prefix (`emit()` is refused, saying why). */
  get outboxAvailable(): boolean {
    return this.outbox instanceof RedisOutbox;
  }

  /** Outbox: why this store has none (`emit()`'s refusal says it); undefined when it has one. */
  get outboxUnavailable(): IdempotencyOutboxStore['outboxUnavailable'] {
    return this.outbox instanceof RedisOutbox ? undefined : this.outbox;
  }

  /** The outbox; a configuration error (not an outage) on a store without one, never a message silently dropped. */
  private outboxOrThrow(): RedisOutbox {
    if (this.outbox instanceof RedisOutbox) return this.outbox;
    throw outboxUnavailableError(this.outbox);
  }

  async release(key: string, token: string): Promise<boolean> {
    return Number(await this.scripts.run(RELEASE, this.redisKey(key), [token])) === 1;
  }

  async renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    const ttl = wholeMs(leaseTtl, 'leaseTtl', 'RedisIdempotencyStore.renew');
    return Number(await this.scripts.run(RENEW, this.redisKey(key), [token, ttl])) === 1;
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    return toRecord(key, (await this.scripts.run(GET, this.redisKey(key), [])) as unknown[]);
  }

  async delete(key: string): Promise<boolean> {
    this.nearCache?.forget(key);
    const deleted = Number(await this.scripts.run(DELETE_WITH_STEPS, this.redisKey(key), [])) > 0;
    // Redis writes the invalidation of a key tracked by a near cache in 'client' mode (on
    // another instance) just after its reply to this delete. Answered, the PING behind it
    // shows that invalidation went out too: a caller told of the delete by this instance
    // and asking another one then finds the record dropped there, as in 'broadcast' mode.
    if (deleted) await this.scripts.ping().catch(() => undefined);
    return deleted;
  }

  /** Every step record of the key (redis-steps.ts): one round trip. */
  loadSteps(key: string): Promise<Record<string, string>> {
    return loadSteps(this.scripts, this.redisKey(key));
  }

  /** Records a finished step, compare-and-set on the lease token (redis-steps.ts). */
  saveStep(key: string, token: string, request: StepRequest): Promise<boolean> {
    return saveStep(this.scripts, this.redisKey(key), token, request);
  }

  /** Readiness probe: resolves when Redis answers PING within `timeout`. */
  ping(): Promise<void> {
    return this.scripts.ping();
  }

  /**
   * Boot check (the module calls it; call it yourself before using the store without the
   * module): waits, up to `readyTimeout`, for a client that is still connecting (opens a
   * `lazyConnect` one), and throws `IdempotencyConfigurationError` for one that does not
   * become ready (see `readyTimeout`). Then starts the near cache, when it is on, without
   * waiting for it; it answers from memory once Redis's invalidations are proven to arrive.
   */
  async verify(): Promise<void> {
    if (this.readyTimeout > 0) await awaitReady(this.scripts, this.readyTimeout, 'RedisIdempotencyStore');
    this.nearCache?.start();
  }

  /**
   * Closes the near cache's own connection (never the client passed in); the store keeps
   * working, every claim going to Redis. The module calls it on shutdown.
   */
  async close(): Promise<void> {
    // The client's owner closes it next: the watchdog must not open it again.
    this.scripts.watchdog?.stop();
    await this.nearCache?.close();
  }

  /**
   * Resolves once the near cache reflects every write, delete, `FLUSHDB`, `FLUSHALL` and
   * `SWAPDB` that Redis ran before the call (one `PING` on the cache's own connection and
   * one read through the client, sent together). Redis sends a flush's invalidation just
   * after it answers the flushing client, so call it after a flush, a swap or a delete
   * made outside this store, before claims that must not see the old records (tests that
   * flush between cases, say). Resolves at once when the cache is off; never rejects.
   * See docs/redis.md, "Near cache".
   */
  async syncNearCache(): Promise<void> {
    await this.nearCache?.sync();
  }

  /** What the near cache holds and did; `undefined` when the `nearCache` option is off. */
  nearCacheStats(): RedisNearCacheStats | undefined {
    return this.nearCache?.stats();
  }

  /** Listeners of the near cache's `store_error` events (IdempotencyModule adds its own). */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.listeners.add(listener);
  }

  private reportNearCacheError(error: unknown, reason: string, topic = 'near-cache'): void {
    const at = Date.now();
    const event: IdempotencyEvent = { type: 'store_error', key: '', at, durationMs: 0, error, reason: `RedisIdempotencyStore: ${reason}` };
    this.listeners.emit(event);
    if (this.listeners.size > 0) return;
    // Nobody listens (the store is used without the module): a rate-limited warning.
    this.fallbackLog ??= new RateLimitedLog(consoleLogger);
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    this.fallbackLog.warn(`${topic}:${message}`, (error as Error)?.message === reason ? event.reason! : `${event.reason}: ${message}`);
  }
}

const consoleLogger = {
  log: (message: unknown) => console.log(message),
  warn: (message: unknown) => console.warn(message),
  error: (message: unknown) => console.error(message),
};

/** Parses `[s, t, e, f, r]`. */
function toRecord(key: string, fields: unknown[]): IdempotencyRecord | undefined {
  const status = asString(fields[0]);
  if (status === undefined) return undefined;
  const expiry = Number(asString(fields[2]));
  const fingerprint = asString(fields[3]);
  if (status === 'p') {
    return withFingerprint({ status: 'in_progress', key, leaseToken: asString(fields[1]) ?? '', leaseExpiresAt: expiry }, fingerprint);
  }
  if (status === 'c' && !isAbsent(fields[4])) {
    // A record completed before the token was kept has none: leaseToken stays absent.
    const leaseToken = asString(fields[1]);
    const record: CompletedRecord = { status: 'completed', key, result: asString(fields[4])!, expiresAt: expiry };
    return withFingerprint(leaseToken === undefined ? record : { ...record, leaseToken }, fingerprint);
  }
  throw new Error(
    `RedisIdempotencyStore: the record under key ${key} is not in the format of this store (status ${JSON.stringify(status)}). ` +
      'Another program may write under the same prefix; give this store its own prefix.',
  );
}

function withFingerprint<T extends IdempotencyRecord>(record: T, fingerprint: string | undefined): T {
  return fingerprint === undefined ? record : { ...record, fingerprint };
}
