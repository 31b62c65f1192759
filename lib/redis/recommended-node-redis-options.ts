import { checkWholeNumber } from '../core/options.js';
import type { RecommendedRedisOptionsInput } from './recommended-options.js';

/** node-redis's socket options that `recommendedNodeRedisOptions()` sets. */
export interface RecommendedNodeRedisSocketOptions {
  connectTimeout: number;
  reconnectStrategy: (retries: number) => number;
}

/** The node-redis (`redis` 5 or 6) client options that make an outage fail fast and heal by itself. */
export interface RecommendedNodeRedisOptions {
  disableOfflineQueue: boolean;
  socket: RecommendedNodeRedisSocketOptions;
  commandOptions: { timeout: number };
}

/**
 * node-redis client options for a request path (spread them into `createClient({...})`;
 * merge your own `socket` settings into `socket`):
 * - `disableOfflineQueue: true`: while disconnected, commands reject at once instead of
 *   queueing (a queued claim would run minutes later and lock its key for nobody).
 * - `commandOptions.timeout`: a hung or partitioned server fails the command instead of
 *   the request hanging (node-redis 6 has 5 s by default, node-redis 5 none).
 * - `socket.connectTimeout`: a dead address is noticed quickly.
 * - `socket.reconnectStrategy`: reconnect forever with a capped backoff, so the client
 *   heals by itself when Redis returns (node-redis 6's default gives up after a socket
 *   timeout).
 *
 * With `disableOfflineQueue` the client refuses every command until it is ready.
 * `IdempotencyModule` waits for it during `app.init()` (`RedisIdempotencyStore`'s
 * `readyTimeout`, and connects a client not connected yet); other code of yours sharing
 * the client, the token store and the lock provider need `await client.connect()` first.
 *
 * @example
 * const redis = createClient({ url: 'redis://redis:6379', ...recommendedNodeRedisOptions() });
 */
export function recommendedNodeRedisOptions(input: RecommendedRedisOptionsInput = {}): RecommendedNodeRedisOptions {
  const owner = 'recommendedNodeRedisOptions';
  checkWholeNumber(owner, 'commandTimeout', input.commandTimeout, { unit: 'ms', example: '1_000' });
  checkWholeNumber(owner, 'connectTimeout', input.connectTimeout, { unit: 'ms', example: '2_000' });
  checkWholeNumber(owner, 'maxReconnectDelay', input.maxReconnectDelay, { unit: 'ms', example: '1_000' });
  const maxReconnectDelay = input.maxReconnectDelay ?? 1_000;
  return {
    disableOfflineQueue: true,
    socket: {
      connectTimeout: input.connectTimeout ?? 2_000,
      reconnectStrategy: (retries) => Math.min((retries + 1) * 100, maxReconnectDelay),
    },
    commandOptions: { timeout: input.commandTimeout ?? 1_000 },
  };
}

/** The `createCluster()` counterpart of `RecommendedNodeRedisOptions`. */
export interface RecommendedNodeRedisClusterOptions {
  defaults: { disableOfflineQueue: boolean; socket: RecommendedNodeRedisSocketOptions };
  commandOptions: { timeout: number };
}

/**
 * `recommendedNodeRedisOptions()` for a node-redis Cluster: the connection settings under
 * `defaults` (every node's connection), the command timeout at the top, where
 * `createCluster()` expects them. Merge your own node defaults (a password, TLS) into
 * `defaults`.
 *
 * @example
 * const cluster = createCluster({ rootNodes: [{ url: 'redis://redis-0:6379' }], ...recommendedNodeRedisClusterOptions() });
 */
export function recommendedNodeRedisClusterOptions(input: RecommendedRedisOptionsInput = {}): RecommendedNodeRedisClusterOptions {
  const { commandOptions, ...defaults } = recommendedNodeRedisOptions(input);
  return { defaults, commandOptions };
}
