import { checkWholeNumber } from '../core/options.js';

/** node-redis's socket options that `recommendedNodeRedisOptions()` sets. */
export interface RecommendedNodeRedisSocketOptions {
  connectTimeout: number;
  reconnectStrategy: (retries: number) => number;
}

/** The node-redis (`redis` 5 or 6) client options that make an outage fail fast and heal by itself. */
export interface RecommendedNodeRedisOptions {
  disableOfflineQueue: boolean;
  socket: RecommendedNodeRedisSocketOptions;
}

/** What `recommendedNodeRedisOptions` may be told: the bounds to use. */
export interface RecommendedNodeRedisOptionsInput {
  /** Longest wait for a TCP connection, ms (node-redis `socket.connectTimeout`). @default 2000 */
  connectTimeout?: number;
  /** Longest pause between two reconnection attempts, ms. @default 1000 */
  maxReconnectDelay?: number;
}

/**
 * node-redis client options for a request path (spread them into `createClient({...})`;
 * merge your own `socket` settings into `socket`):
 * - `disableOfflineQueue: true`: while disconnected, commands reject at once instead of
 *   queueing (a queued claim would run minutes later and lock its key for nobody).
 * - `socket.connectTimeout`: a dead address is noticed quickly.
 * - `socket.reconnectStrategy`: reconnect forever with a capped backoff, so the client
 *   heals by itself when Redis returns (node-redis 6's default gives up after a socket
 *   timeout).
 *
 * No command timeout: node-redis's `commandOptions.timeout` only counts until a command
 * is written to the socket, so it never ends the wait for a hung server's reply. The
 * store's own `timeout` (2 s by default) bounds every call instead.
 *
 * With `disableOfflineQueue` the client refuses every command until it is ready.
 * `IdempotencyModule` waits for it during `app.init()` (`RedisIdempotencyStore`'s
 * `readyTimeout`, and connects a client not connected yet); other code of yours sharing
 * the client, the token store and the lock provider need `await client.connect()` first.
 *
 * @example
 * const redis = createClient({ url: 'redis://redis:6379', ...recommendedNodeRedisOptions() });
 */
export function recommendedNodeRedisOptions(input: RecommendedNodeRedisOptionsInput = {}): RecommendedNodeRedisOptions {
  const owner = 'recommendedNodeRedisOptions';
  checkWholeNumber(owner, 'connectTimeout', input.connectTimeout, { unit: 'ms', example: '2_000' });
  checkWholeNumber(owner, 'maxReconnectDelay', input.maxReconnectDelay, { unit: 'ms', example: '1_000' });
  const maxReconnectDelay = input.maxReconnectDelay ?? 1_000;
  return {
    disableOfflineQueue: true,
    socket: {
      connectTimeout: input.connectTimeout ?? 2_000,
      reconnectStrategy: (retries) => Math.min((retries + 1) * 100, maxReconnectDelay),
    },
  };
}

/** The `createCluster()` counterpart of `RecommendedNodeRedisOptions`. */
export interface RecommendedNodeRedisClusterOptions {
  defaults: RecommendedNodeRedisOptions;
}

/**
 * `recommendedNodeRedisOptions()` for a node-redis Cluster: the same settings under
 * `defaults`, which applies them to the connection of every node. Merge your own node
 * defaults (a password, TLS) into `defaults`.
 *
 * @example
 * const cluster = createCluster({ rootNodes: [{ url: 'redis://redis-0:6379' }], ...recommendedNodeRedisClusterOptions() });
 */
export function recommendedNodeRedisClusterOptions(input: RecommendedNodeRedisOptionsInput = {}): RecommendedNodeRedisClusterOptions {
  return { defaults: recommendedNodeRedisOptions(input) };
}
