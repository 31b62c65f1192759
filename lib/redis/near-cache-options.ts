import { IdempotencyConfigurationError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type { NearCacheClient } from './near-cache-connection.js';

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
  /**
   * Invalidation notices received. With `tracking: 'client'`, one per cached (tracked) key
   * written, deleted or expired by anyone; with `'broadcast'`, one per key written under
   * the prefix by any instance, this one's own claims and completions included.
   */
  readonly invalidations: number;
  /**
   * How Redis tells the cache of changes, while it answers: `'client'` (`OPTIN` tracking
   * on the client passed in, the default with an ioredis standalone client) or
   * `'broadcast'` (`BCAST` tracking on the cache's own connection: node-redis, Sentinel, a
   * client another near cache already tracks on, or one with tracking of its own). See
   * docs/redis.md, "Near cache". `undefined` while the cache is off.
   */
  readonly tracking: NearCacheTrackingMode | undefined;
  /** Records dropped to stay within `maxEntries` or `maxBytes`. */
  readonly evictions: number;
}

/**
 * How the near cache hears of writes: `'client'` (OPTIN tracking on the store's own client, no invalidation for
 * a first execution) or `'broadcast'` (BCAST on the key prefix). See `RedisNearCacheStats.tracking`.
 */
export type NearCacheTrackingMode = 'client' | 'broadcast';

export const DEFAULT_NEAR_CACHE_MAX_ENTRIES = 10_000;
export const DEFAULT_NEAR_CACHE_MAX_BYTES = 16 * 1024 * 1024;
export const DEFAULT_NEAR_CACHE_MAX_AGE = 60_000;

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
  if (typeof client.openTrackingConnection !== 'function' && typeof client.duplicate !== 'function') {
    throw new IdempotencyConfigurationError(
      `${OWNER}: nearCache needs a client with duplicate(), to open its own connection for Redis's invalidation messages.`,
      'Pass an ioredis 5 or 6 Redis client (new Redis(...)) or a node-redis 5 or 6 client (createClient(...)), or remove the nearCache option.',
    );
  }
  return {
    maxEntries: options.maxEntries ?? DEFAULT_NEAR_CACHE_MAX_ENTRIES,
    maxBytes: options.maxBytes ?? DEFAULT_NEAR_CACHE_MAX_BYTES,
    maxAge: options.maxAge ?? DEFAULT_NEAR_CACHE_MAX_AGE,
  };
}
