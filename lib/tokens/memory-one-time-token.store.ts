import { ExpiringMap } from '../core/expiring-map.js';
import { checkWholeNumber } from '../core/options.js';
import type { OneTimeTokenConsumeResult, OneTimeTokenStore } from './one-time-token.store.js';

/** Options of `MemoryOneTimeTokenStore`. */
export interface MemoryOneTimeTokenStoreOptions {
  /**
   * Most tokens kept at once (used ones included, until their ttl ends). When full,
   * the oldest token is forgotten to make room, so a very old unused token may come
   * back as `unknown`.
   * @default 10000
   */
  maxEntries?: number;
}

interface Entry {
  used: boolean;
  expiresAt: number;
}

/**
 * Process-local one-time tokens: O(1) per operation and bounded in size. Consumption
 * is atomic because it runs synchronously on the event loop. Use
 * `RedisOneTimeTokenStore` when several instances serve the same forms.
 */
export class MemoryOneTimeTokenStore implements OneTimeTokenStore {
  // Insertion order is issue order, so the head holds the oldest tokens.
  private readonly entries = new ExpiringMap<string, Entry>((entry) => entry.expiresAt);
  readonly maxEntries: number;

  constructor(options: MemoryOneTimeTokenStoreOptions = {}) {
    checkWholeNumber('MemoryOneTimeTokenStore', 'maxEntries', options.maxEntries, { example: '10_000' });
    this.maxEntries = options.maxEntries ?? 10_000;
  }

  /** Tokens held, live or not yet swept. */
  get size(): number {
    return this.entries.size;
  }

  async save(key: string, ttl: number): Promise<boolean> {
    const now = Date.now();
    if (this.entries.live(key, now)) return false;
    // Bounded work per call: a few expired tokens leave from the head.
    this.entries.sweep(now, 2);
    if (this.entries.size >= this.maxEntries) this.entries.deleteOldest();
    this.entries.set(key, { used: false, expiresAt: now + ttl });
    return true;
  }

  async consume(key: string): Promise<OneTimeTokenConsumeResult> {
    const entry = this.entries.live(key, Date.now());
    if (!entry) return 'unknown';
    if (entry.used) return 'already_used';
    entry.used = true;
    return 'consumed';
  }

  async revoke(key: string): Promise<boolean> {
    return this.entries.delete(key);
  }

  async ping(): Promise<void> {}

  /** Drops every token (tests). */
  clear(): void {
    this.entries.clear();
  }
}
