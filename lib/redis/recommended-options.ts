import { checkWholeNumber } from '../core/options.js';

/** The ioredis options that make an outage fail fast and heal by itself. */
export interface RecommendedRedisOptions {
  enableOfflineQueue: boolean;
  maxRetriesPerRequest: number;
  commandTimeout: number;
  connectTimeout: number;
  retryStrategy: (times: number) => number;
}

/** What `recommendedRedisOptions` may be told: the timeouts to use. */
export interface RecommendedRedisOptionsInput {
  /** Longest wait for one command's reply, ms (ioredis `commandTimeout`). @default 1000 */
  commandTimeout?: number;
  /** Longest wait for a TCP connection, ms (ioredis `connectTimeout`). @default 2000 */
  connectTimeout?: number;
  /** Longest pause between two reconnection attempts, ms. @default 1000 */
  maxReconnectDelay?: number;
}

/**
 * ioredis client options for a request path (spread them into `new Redis({...})`, or
 * into `redisOptions` of a `Cluster`):
 * - `enableOfflineQueue: false`: while disconnected, commands reject at once instead of
 *   queueing (a queued claim would run minutes later and lock its key for nobody).
 * - `maxRetriesPerRequest: 1`: a command caught by a dropped connection is retried once.
 * - `commandTimeout`: a hung or partitioned server fails the command instead of the request hanging.
 * - `retryStrategy`: reconnect forever with a capped backoff, so the client heals by
 *   itself when Redis returns (ioredis never gives up while this returns a number).
 *
 * With `enableOfflineQueue: false`, wait for the client's `ready` event (or use
 * `lazyConnect: true` and `await client.connect()`) before serving traffic.
 *
 * @example
 * const redis = new Redis({ host: 'redis', ...recommendedRedisOptions() });
 */
export function recommendedRedisOptions(input: RecommendedRedisOptionsInput = {}): RecommendedRedisOptions {
  checkWholeNumber('recommendedRedisOptions', 'commandTimeout', input.commandTimeout, { unit: 'ms', example: '1_000' });
  checkWholeNumber('recommendedRedisOptions', 'connectTimeout', input.connectTimeout, { unit: 'ms', example: '2_000' });
  checkWholeNumber('recommendedRedisOptions', 'maxReconnectDelay', input.maxReconnectDelay, { unit: 'ms', example: '1_000' });
  const maxReconnectDelay = input.maxReconnectDelay ?? 1_000;
  return {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: input.commandTimeout ?? 1_000,
    connectTimeout: input.connectTimeout ?? 2_000,
    retryStrategy: (times) => Math.min(times * 100, maxReconnectDelay),
  };
}

/** The `Cluster` counterpart of `recommendedRedisOptions()`. */
export interface RecommendedRedisClusterOptions {
  enableOfflineQueue: boolean;
  clusterRetryStrategy: (times: number) => number;
  redisOptions: Omit<RecommendedRedisOptions, 'enableOfflineQueue' | 'retryStrategy'>;
}

/**
 * `recommendedRedisOptions()` for an ioredis `Cluster`: the same fail-fast and
 * heal-by-itself settings, placed where `Cluster` expects them. Wait for the
 * cluster's `ready` event before serving traffic.
 *
 * @example
 * const cluster = new Cluster(seedNodes, recommendedRedisClusterOptions());
 * await once(cluster, 'ready');
 */
export function recommendedRedisClusterOptions(input: RecommendedRedisOptionsInput = {}): RecommendedRedisClusterOptions {
  const { enableOfflineQueue, retryStrategy, ...redisOptions } = recommendedRedisOptions(input);
  return { enableOfflineQueue, clusterRetryStrategy: retryStrategy, redisOptions };
}
