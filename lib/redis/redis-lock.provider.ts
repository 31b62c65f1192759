import { randomUUID } from 'node:crypto';
import {
  TokenLockHandle,
  checkLockArguments,
  type AcquireLockOptions,
  type LockHandle,
  type LockProvider,
} from '../locks/lock-provider.js';
import { LuaScript, RedisScriptRunner, wholeMs, type RedisCallOptions, type RedisClientLike } from './redis-client.js';
import type { NodeRedisClientLike } from './node-redis-client.js';

/** Options of `RedisLockProvider`. */
export interface RedisLockProviderOptions extends RedisCallOptions {
  /** Prepended to every resource name to form its Redis key. @default 'lock:' */
  prefix?: string;
}

const ACQUIRE = new LuaScript(
  'acquire',
  `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
`,
);

// Compare-and-delete: a holder whose lock expired never deletes the next holder's lock.
const RELEASE = new LuaScript(
  'release',
  `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
);

const EXTEND = new LuaScript(
  'extend',
  `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`,
);

/**
 * Locks in one Redis (ioredis 5 or 6, standalone or Cluster): `SET NX PX` with a random
 * token, released and extended by token compare-and-set scripts. Mutual exclusion
 * holds across every process sharing the Redis, as long as that Redis does not lose
 * writes (a failover to a replica that missed the SET can grant the lock twice: for
 * work that must never run twice, also guard the write itself, e.g. a version column).
 *
 * @example
 * const locks = new RedisLockProvider(redis, { prefix: 'shop:lock:' });
 * await withLock(locks, `inventory:${sku}`, async () => { ... });
 */
export class RedisLockProvider implements LockProvider {
  readonly prefix: string;
  private readonly scripts: RedisScriptRunner;

  constructor(client: RedisClientLike | NodeRedisClientLike, options: RedisLockProviderOptions = {}) {
    this.scripts = new RedisScriptRunner(client, options, 'RedisLockProvider');
    this.prefix = options.prefix ?? 'lock:';
  }

  async acquire(resource: string, options: AcquireLockOptions): Promise<LockHandle | undefined> {
    checkLockArguments(resource, options?.ttl, 'RedisLockProvider.acquire');
    const ttl = wholeMs(options.ttl, 'ttl', 'RedisLockProvider.acquire');
    const token = randomUUID();
    const startedAt = Date.now();
    let acquired: boolean;
    try {
      acquired = Number(await this.scripts.run(ACQUIRE, this.prefix + resource, [token, ttl])) === 1;
    } catch (error) {
      // The SET may still run (a hung Redis executes it on resuming) and hold the lock
      // for nobody until its ttl. The token-checked release, sent right behind it on
      // the same connection, undoes it; its own failure changes nothing.
      this.operations.release(resource, token).catch(() => false);
      throw error;
    }
    return acquired ? new TokenLockHandle(resource, token, startedAt + ttl, ttl, this.operations) : undefined;
  }

  private readonly operations = {
    extend: async (resource: string, token: string, ttl: number): Promise<boolean> =>
      Number(await this.scripts.run(EXTEND, this.prefix + resource, [token, wholeMs(ttl, 'ttl', 'RedisLockProvider.extend')])) === 1,
    release: async (resource: string, token: string): Promise<boolean> =>
      Number(await this.scripts.run(RELEASE, this.prefix + resource, [token])) === 1,
  };

  ping(): Promise<void> {
    return this.scripts.ping();
  }
}
