import type { OneTimeTokenConsumeResult, OneTimeTokenStore } from './one-time-token.store.js';

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
  private readonly entries = new Map<string, Entry>();
  readonly maxEntries: number;

  constructor(options: MemoryOneTimeTokenStoreOptions = {}) {
    this.maxEntries = options.maxEntries ?? 10_000;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) {
      throw new RangeError(`MemoryOneTimeTokenStore: maxEntries must be a positive integer, got ${options.maxEntries}.`);
    }
  }

  /** Tokens held, live or not yet swept. */
  get size(): number {
    return this.entries.size;
  }

  async save(key: string, ttl: number): Promise<boolean> {
    const now = Date.now();
    if (this.live(key, now)) return false;
    this.sweepHead(now);
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, { used: false, expiresAt: now + ttl });
    return true;
  }

  async consume(key: string): Promise<OneTimeTokenConsumeResult> {
    const entry = this.live(key, Date.now());
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

  private live(key: string, now: number): Entry | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt > now) return entry;
    this.entries.delete(key);
    return undefined;
  }

  /** Bounded work per call: drops a few expired tokens from the head. */
  private sweepHead(now: number): void {
    let budget = 2;
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt > now || budget-- === 0) break;
      this.entries.delete(key);
    }
  }
}
