import { checkWholeNumber } from '../core/options.js';

/** The ioredis options that make an outage fail fast and heal by itself. */
export interface RecommendedRedisOptions {
  /** `false`: while Redis is away a command fails at once (503) instead of queueing. */
  enableOfflineQueue: boolean;
  /** `1`: a command caught by a reconnection is retried once, not for ever. */
  maxRetriesPerRequest: number;
  /** Longest wait for one command's reply, ms: a hung server fails the command. */
  commandTimeout: number;
  /** Longest wait for a connection to be made, ms. */
  connectTimeout: number;
  /**
   * A connection on which nothing came back for this long, ms, while commands waited is
   * dropped and made again: a path that went silent without closing the socket (a
   * blackhole) heals by itself instead of after the kernel's ~15 minutes.
   */
  socketTimeout: number;
  /** Reconnection backoff, ms, capped at `maxReconnectDelay`. */
  retryStrategy: (times: number) => number;
}

/** What `recommendedRedisOptions` may be told: the timeouts to use. */
export interface RecommendedRedisOptionsInput {
  /** Longest wait for one command's reply, ms (ioredis `commandTimeout`). @default 1000 */
  commandTimeout?: number;
  /** Longest wait for a TCP connection, ms (ioredis `connectTimeout`). @default 2000 */
  connectTimeout?: number;
  /**
   * Longest silence of a connection that has commands waiting for their replies (its
   * handshake included), ms, after which the connection counts as dead: ioredis destroys
   * it and reconnects (ioredis `socketTimeout`). A path that drops every packet without a
   * reset (a NAT or firewall that lost its state) leaves the socket open for the kernel's
   * ~15 minutes otherwise. @default the larger of 2000 and `commandTimeout`
   */
  socketTimeout?: number;
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
 * - `socketTimeout`: a connection on which nothing came back for that long while commands
 *   waited is destroyed and opened again, so the client never stays on a dead socket
 *   (a path that silently drops packets).
 * - `retryStrategy`: reconnect forever with a capped backoff, so the client heals by
 *   itself when Redis returns (ioredis never gives up while this returns a number).
 *
 * With `enableOfflineQueue: false` the client refuses every command until it is ready.
 * `IdempotencyModule` waits for it during `app.init()` (`RedisIdempotencyStore`'s
 * `readyTimeout`, and connects a `lazyConnect` client); other code of yours sharing the
 * client, or a store used without the module, waits for its `ready` event (or
 * `await store.verify()`) before serving traffic.
 *
 * @example
 * const redis = new Redis({ host: 'redis', ...recommendedRedisOptions() });
 */
export function recommendedRedisOptions(input: RecommendedRedisOptionsInput = {}): RecommendedRedisOptions {
  checkWholeNumber('recommendedRedisOptions', 'commandTimeout', input.commandTimeout, { unit: 'ms', example: '1_000' });
  checkWholeNumber('recommendedRedisOptions', 'connectTimeout', input.connectTimeout, { unit: 'ms', example: '2_000' });
  checkWholeNumber('recommendedRedisOptions', 'socketTimeout', input.socketTimeout, { unit: 'ms', example: '2_000' });
  checkWholeNumber('recommendedRedisOptions', 'maxReconnectDelay', input.maxReconnectDelay, { unit: 'ms', example: '1_000' });
  const maxReconnectDelay = input.maxReconnectDelay ?? 1_000;
  const commandTimeout = input.commandTimeout ?? 1_000;
  return {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout,
    connectTimeout: input.connectTimeout ?? 2_000,
    socketTimeout: input.socketTimeout ?? Math.max(2_000, commandTimeout),
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
 * heal-by-itself settings, placed where `Cluster` expects them. `IdempotencyModule`
 * waits during `app.init()` for the cluster to be ready (`readyTimeout`); without the
 * module, wait for its `ready` event before serving traffic.
 *
 * @example
 * const cluster = new Cluster(seedNodes, recommendedRedisClusterOptions());
 */
export function recommendedRedisClusterOptions(input: RecommendedRedisOptionsInput = {}): RecommendedRedisClusterOptions {
  const { enableOfflineQueue, retryStrategy, ...redisOptions } = recommendedRedisOptions(input);
  return { enableOfflineQueue, clusterRetryStrategy: retryStrategy, redisOptions };
}
