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
  LUA_NOW_MS,
  LuaScript,
  RedisScriptRunner,
  asString,
  isAbsent,
  wholeMs,
  type RedisCallOptions,
  type RedisClientLike,
} from './redis-client.js';
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
}

/*
 * One record = one Redis hash, whose Redis expiry is the lease while in progress and
 * the retention once completed, so Redis itself forgets expired leases and results:
 *   s  status: 'p' (in progress) or 'c' (completed)
 *   t  lease token; kept once completed, so that a repeated complete under it is told
 *      apart from a lost lease
 *   e  leaseExpiresAt or expiresAt, epoch ms from the Redis server clock
 *   f  fingerprint (optional)
 *   r  serialized result (completed only)
 *   x:<token>  a claim released before it arrived (RELEASE on an absent record), one
 *      field per token: a key can hold several claims undone at once (duplicates from
 *      one or more processes during an outage), and any of them may still arrive late
 * Each script touches that one key, so every primitive is one atomic round trip and
 * every script stays within one Cluster hash slot.
 */
const FIELDS = `'s', 't', 'e', 'f', 'r'`;

const CLAIM = new LuaScript(
  'claim',
  `${LUA_NOW_MS}
local existing = redis.call('HMGET', KEYS[1], ${FIELDS}, 'x')
-- 'x' holds the one marker 0.6 wrote: read during a rolling upgrade.
if existing[6] == ARGV[1] or redis.call('HEXISTS', KEYS[1], 'x:' .. ARGV[1]) == 1 then
  -- This claim's caller was told it failed and has undone it already (RELEASE left the
  -- marker): it arrives late (held in a socket, resent after a reconnection), for nobody.
  return {0, 'p', ARGV[1], '0'}
end
if existing[1] == 'p' and existing[2] == ARGV[1] then
  -- This very claim, sent again (the client resent it after its reply was lost): it is ours.
  return {1, existing[3]}
end
if existing[1] then
  return {0, existing[1], existing[2], existing[3], existing[4], existing[5]}
end
local expires = ms_string(now_ms() + tonumber(ARGV[2]))
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'e', expires, 'f', ARGV[4])
else
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'e', expires)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, expires}
`,
);

// Idempotent per token: a repeat whose first reply was lost answers 1 again and leaves
// the stored result as it is.
const COMPLETE = new LuaScript(
  'complete',
  `${LUA_NOW_MS}
local lease = redis.call('HMGET', KEYS[1], 's', 't')
if lease[2] ~= ARGV[1] then return 0 end
if lease[1] == 'c' then return 1 end
if lease[1] ~= 'p' then return 0 end
redis.call('HSET', KEYS[1], 's', 'c', 'r', ARGV[2], 'e', ms_string(now_ms() + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`,
);

// A release leaves the marker 'x:<token>' (for RELEASED_MARKER_MS) in place of the
// record: the claim it undoes may still arrive after it (a command held in a socket the
// client dropped, or resent by the client after it reconnected, on another connection
// than the release), and must then lock nothing. One field per token, and the record's
// own fields removed rather than the key: the markers of the other claims undone on
// that key stay (one shared marker was overwritten by the next release, and the late
// claim it had undone then locked the key for a lease nobody owned).
const RELEASED_MARKER_MS = 300_000;
const RELEASE = new LuaScript(
  'release',
  `local lease = redis.call('HMGET', KEYS[1], 's', 't')
local released = 0
if lease[1] == 'p' and lease[2] == ARGV[1] then
  redis.call('HDEL', KEYS[1], ${FIELDS})
  released = 1
elseif lease[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'x:' .. ARGV[1], '1')
redis.call('PEXPIRE', KEYS[1], ${RELEASED_MARKER_MS})
return released
`,
);

const RENEW = new LuaScript(
  'renew',
  `${LUA_NOW_MS}
local lease = redis.call('HMGET', KEYS[1], 's', 't')
if lease[1] ~= 'p' or lease[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'e', ms_string(now_ms() + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`,
);

const GET = new LuaScript('get', `return redis.call('HMGET', KEYS[1], ${FIELDS})`);

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
export class RedisIdempotencyStore implements IdempotencyStore {
  readonly prefix: string;
  private readonly scripts: RedisScriptRunner;
  private readonly nearCache: NearCache | undefined;
  private readonly listeners = new StoreEventListeners();
  private fallbackLog: RateLimitedLog | undefined;
  private readonly readyTimeout: number;

  constructor(client: RedisClientLike | NodeRedisClientLike, options: RedisIdempotencyStoreOptions = {}) {
    this.scripts = new RedisScriptRunner(client, options, 'RedisIdempotencyStore');
    // ioredis as it is, node-redis adapted: the near cache drives either the same way.
    const adapted = this.scripts.client as NearCacheClient;
    this.prefix = options.prefix ?? 'idempotency:';
    checkWholeNumber('RedisIdempotencyStore', 'readyTimeout', options.readyTimeout, { unit: 'ms', min: 0, example: '10_000' });
    this.readyTimeout = options.readyTimeout ?? DEFAULT_REDIS_READY_TIMEOUT;
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
    // A hit costs no Redis call and no extra promise job (an invalid leaseTtl is refused below, as without the cache).
    if (Number.isSafeInteger(request.leaseTtl) && request.leaseTtl >= 1) {
      const cached = nearCache.lookup(key);
      if (cached !== undefined) return Promise.resolve(cached);
    }
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
    return Number(await this.scripts.run(COMPLETE, this.redisKey(key), [token, request.result, ttl])) === 1;
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
