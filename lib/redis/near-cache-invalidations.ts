/** What the invalidation messages change in the near cache. */
export interface InvalidatedCache {
  /** The record under `key` changed in Redis (written, deleted, expired): drop it. */
  invalidate(key: string): void;
  /** Empty the cache and keep every read in flight from inserting. */
  clear(): void;
}

/**
 * Reads Redis's invalidation messages (`__redis__:invalidate` on the near cache's own
 * connection) into the cache: a key under the store's prefix drops that record, a
 * message without a key (`FLUSHDB`, `FLUSHALL`) empties the cache, and the probe key of
 * a proof of delivery resolves its wait.
 */
export class InvalidationMessages {
  /** Invalidation notices heard, keys and flushes (stats). */
  count = 0;
  /** Redis keys as invalidation messages name them: the client's keyPrefix, then the store's prefix. */
  readonly trackedPrefix: string;
  private probe: { readonly key: string; readonly seen: () => void } | undefined;

  constructor(
    private readonly keyPrefix: string,
    prefix: string,
    private readonly cache: InvalidatedCache,
  ) {
    this.trackedPrefix = keyPrefix + prefix;
  }

  /**
   * Resolves when the invalidation of `key` (as sent by the client, before its keyPrefix)
   * arrives, rejects after `timeout` ms; `cancel` stops waiting.
   */
  awaitProbe(key: string, timeout: number): { readonly seen: Promise<void>; cancel(): void } {
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<void>((resolve, reject) => {
      this.probe = { key: this.keyPrefix + key, seen: resolve };
      timer = setTimeout(() => reject(new Error(`Redis's invalidation of the probe key did not arrive within ${timeout} ms`)), timeout);
      timer.unref();
    });
    return {
      seen,
      cancel: () => {
        clearTimeout(timer);
        this.probe = undefined;
      },
    };
  }

  /** One message of `__redis__:invalidate`: a key, a list of keys, or nothing (a flush). */
  handle(message: unknown): void {
    if (message === null || message === undefined || (Array.isArray(message) && message.length === 0)) {
      this.count++;
      this.cache.clear();
      return;
    }
    if (!Array.isArray(message)) {
      this.invalidateKey(message);
      return;
    }
    for (const key of message) this.invalidateKey(key);
  }

  private invalidateKey(raw: unknown): void {
    this.count++;
    if (raw === null || raw === undefined) return this.cache.clear();
    const redisKey = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw);
    if (redisKey === '') return this.cache.clear();
    if (this.probe !== undefined && redisKey === this.probe.key) this.probe.seen();
    // `<keyPrefix><prefix>{<key>}`: anything else under the prefix is not a record.
    const prefix = this.trackedPrefix;
    if (!redisKey.startsWith(prefix) || redisKey.charCodeAt(redisKey.length - 1) !== 125 /* } */) return;
    if (redisKey.charCodeAt(prefix.length) !== 123 /* { */) return;
    this.cache.invalidate(redisKey.slice(prefix.length + 1, -1));
  }
}
