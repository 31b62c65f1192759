/**
 * `nestjs-idempotency/locks`: distributed locks with fencing by lease, for work that
 * must not run concurrently (not for de-duplication: use `@Idempotent()` for that).
 * Redis-backed provider: `RedisLockProvider` from `nestjs-idempotency/redis`.
 */
export { withLock, type WithLockOptions } from './with-lock.js';
export type { LockProvider, LockHandle, AcquireLockOptions } from './lock-provider.js';
export { MemoryLockProvider } from './memory-lock.provider.js';
export { LockNotAcquiredError, LockLostError } from './lock.errors.js';
