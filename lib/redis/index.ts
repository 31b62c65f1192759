/**
 * `nestjs-idempotency/redis`: the Redis store (standalone and Cluster) through ioredis 5
 * or 6 or node-redis (`redis`) 5 or 6, and Redis-backed one-time tokens and locks. Needs
 * one of the optional peers `ioredis` or `redis`; this entry point loads neither.
 */
export { RedisIdempotencyStore, type RedisIdempotencyStoreOptions } from './redis.store.js';
export { createRedisIdempotencyStore, type OwnedRedisIdempotencyStoreOptions } from './owned-store.js';
export type { NearCacheTrackingMode, RedisNearCacheOptions, RedisNearCacheStats } from './near-cache-options.js';
export { RedisOneTimeTokenStore, type RedisOneTimeTokenStoreOptions } from './redis-one-time-token.store.js';
export { RedisLockProvider, type RedisLockProviderOptions } from './redis-lock.provider.js';
export {
  recommendedRedisOptions,
  recommendedRedisClusterOptions,
  type RecommendedRedisOptions,
  type RecommendedRedisClusterOptions,
  type RecommendedRedisOptionsInput,
} from './recommended-options.js';
export { RedisOperationTimeoutError, DEFAULT_REDIS_TIMEOUT, type RedisClientLike, type RedisCallOptions } from './redis-client.js';
export {
  recommendedNodeRedisOptions,
  recommendedNodeRedisClusterOptions,
  type RecommendedNodeRedisOptions,
  type RecommendedNodeRedisClusterOptions,
  type RecommendedNodeRedisSocketOptions,
  type RecommendedNodeRedisOptionsInput,
} from './recommended-node-redis-options.js';
export type { NodeRedisClientLike } from './node-redis-client.js';
