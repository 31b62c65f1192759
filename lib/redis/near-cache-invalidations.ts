/**
 * What an invalidation message does to the near cache: drop one record, or everything.
 * Every call is synchronous.
 */
export interface InvalidatedCache {
  /** Empty the cache and keep every read in flight from inserting; answering goes on. */
  clear(): void;
  /** The record under `key` changed in Redis (written, deleted, expired): drop it. */
  invalidate(key: string): void;
}

/**
 * What the tracking connection drives in the near cache: whether it answers, until when,
 * and what it must drop. Every call is synchronous.
 */
export interface TrackedCache extends InvalidatedCache {
  /** True while the cache answers. */
  readonly enabled: boolean;
  /** Delivery is proven and the database known: answer until `identityValidUntil` (`performance.now()` ms). */
  enable(identityValidUntil: number): void;
  /** Answer nothing and empty the cache, until `enable` again. */
  disable(): void;
  /** The database's identity was read unchanged: entries may be answered until `until`, if later. */
  extendIdentity(until: number): void;
}

/** A probe key whose invalidation a proof of delivery waits for. */
export interface ExpectedInvalidation {
  /** Resolves when the key's invalidation arrives; rejects after the timeout. */
  readonly seen: Promise<void>;
  /** Stops waiting (always call it, seen or not). */
  cancel(): void;
}

/**
 * Reads the messages of `__redis__:invalidate` as Redis sends them to the tracking
 * connection (RESP2: an array of Redis keys, or null for `FLUSHDB` / `FLUSHALL`), turns
 * the Redis keys of records (`<keyPrefix><prefix>{<key>}`) back into store keys for the
 * cache, ignores every other key (the probe and identity keys, and in the redirect design
 * any other key the user's connection read), and resolves the proof of delivery that
 * waits for a probe key.
 */
export class NearCacheInvalidations {
  /** Messages heard, keys and flushes (stats). */
  count = 0;
  private probe: { readonly key: string; readonly seen: () => void } | undefined;

  /** `trackedPrefix`: Redis keys as invalidation messages name them, the client's keyPrefix then the store's prefix. */
  constructor(
    private readonly trackedPrefix: string,
    private readonly cache: InvalidatedCache,
  ) {}

  /** Waits for the invalidation of `redisKey` (a full Redis key), for at most `timeout` ms. */
  expect(redisKey: string, timeout: number): ExpectedInvalidation {
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<void>((resolve, reject) => {
      this.probe = { key: redisKey, seen: resolve };
      timer = setTimeout(() => reject(new Error(`Redis's invalidation of the probe key did not arrive within ${timeout} ms`)), timeout);
      timer.unref();
    });
    // Not awaited when a step before it fails: no unhandled rejection then.
    seen.catch(() => undefined);
    return {
      seen,
      cancel: () => {
        clearTimeout(timer);
        if (this.probe?.key === redisKey) this.probe = undefined;
      },
    };
  }

  /** One message of the channel, as the client hands it over (Buffers, or an array of them, or null). */
  onMessage(message: unknown): void {
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
    // FLUSHDB / FLUSHALL (a null payload): everything goes, and no read in flight may insert.
    if (raw === null || raw === undefined) return this.cache.clear();
    const redisKey = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw);
    if (redisKey === '') return this.cache.clear();
    if (this.probe !== undefined && redisKey === this.probe.key) this.probe.seen();
    const prefix = this.trackedPrefix;
    // `<keyPrefix><prefix>{<key>}`: anything else under the prefix is not a record.
    if (!redisKey.startsWith(prefix) || redisKey.charCodeAt(redisKey.length - 1) !== 125 /* } */) return;
    if (redisKey.charCodeAt(prefix.length) !== 123 /* { */) return;
    this.cache.invalidate(redisKey.slice(prefix.length + 1, -1));
  }
}
