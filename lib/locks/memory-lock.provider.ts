import { randomUUID } from 'node:crypto';
import { ExpiringMap } from '../core/expiring-map.js';
import { TokenLockHandle, checkLockArguments, type AcquireLockOptions, type LockHandle, type LockProvider } from './lock-provider.js';

interface Held {
  token: string;
  expiresAt: number;
}

/**
 * Process-local locks with expiry: mutual exclusion between the async tasks of one
 * process. Use `RedisLockProvider` for exclusion across processes.
 */
export class MemoryLockProvider implements LockProvider {
  // Insertion order is acquisition order, so the head is the oldest lock. Unbounded on
  // purpose: evicting a held lock would grant it twice; expired locks leave by sweeping.
  private readonly held = new ExpiringMap<string, Held>((held) => held.expiresAt);

  /** Locks held, live or not yet swept. */
  get size(): number {
    return this.held.size;
  }

  async acquire(resource: string, options: AcquireLockOptions): Promise<LockHandle | undefined> {
    checkLockArguments(resource, options?.ttl, 'MemoryLockProvider.acquire');
    const now = Date.now();
    const current = this.held.get(resource);
    if (current && current.expiresAt > now) return undefined;
    // Bounded work per call: a few expired locks leave from the head.
    this.held.sweep(now, 2);
    const token = randomUUID();
    this.held.set(resource, { token, expiresAt: now + options.ttl });
    return new TokenLockHandle(resource, token, now + options.ttl, options.ttl, this.operations);
  }

  private readonly operations = {
    extend: async (resource: string, token: string, ttl: number): Promise<boolean> => {
      const now = Date.now();
      const current = this.held.get(resource);
      if (!current || current.token !== token || current.expiresAt <= now) return false;
      current.expiresAt = now + ttl;
      return true;
    },
    release: async (resource: string, token: string): Promise<boolean> => {
      const current = this.held.get(resource);
      if (!current || current.token !== token) return false;
      this.held.delete(resource);
      return current.expiresAt > Date.now();
    },
  };
}
