export * from './redis-client.js';
export * from './recommended-options.js';
export * from './redis.store.js';
export * from './redis-one-time-token.store.js';
export * from './redis-lock.provider.js';
