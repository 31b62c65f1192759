import { randomUUID } from 'node:crypto';
import type { NearCacheClient } from './near-cache-connection.js';

/**
 * How long the identity key lives without being read, ms: a day. Every check that finds
 * less than half of it left extends it, so it only lapses when no instance with the cache
 * on has run for half a day (and then there is no cache left to mislead).
 */
const IDENTITY_TTL_MS = 24 * 60 * 60 * 1_000;

/**
 * The identity of the database, under the store's prefix: read if present, created (with
 * `ARGV[1]`, a new random value) if not, in one script so two instances never create two.
 * Extended when past half of its life; a write to it sends an invalidation that the cache
 * ignores, as the key is not a record's.
 */
const READ_OR_CREATE = `local id = redis.call('GET', KEYS[1])
if not id then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) / 2 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return id`;

/**
 * Tells whether the database the user's client writes to is still the one the near cache
 * was filled from. `SWAPDB` sends no invalidation at all: after it, every cached record
 * names a record of another database. Each database gets a random identity in one key
 * under the prefix (`<prefix>__near-cache-db__`); a `SWAPDB` brings in the other database's
 * identity (or none, and then a new one is created), and a `FLUSHDB` / `FLUSHALL` removes
 * it, so a read that returns another value than the last one proves the database changed.
 */
export class NearCacheDbIdentity {
  private readonly key: string;
  /** The identity the cached records were read under; undefined until the first read. */
  private known: string | undefined;
  /** Reads sent so far, and the newest whose answer was applied: an older answer arriving late is ignored. */
  private sent = 0;
  private applied = 0;

  constructor(
    private readonly client: NearCacheClient,
    prefix: string,
  ) {
    this.key = `${prefix}__near-cache-db__`;
  }

  /**
   * Reads the identity through the user's client. Resolves to 'same' when it is the known
   * one (or none was known: the cache was empty), 'changed' when the database changed since
   * the last read, 'outdated' when a read sent later was already applied.
   */
  async read(): Promise<'same' | 'changed' | 'outdated'> {
    const sequence = ++this.sent;
    const id = String(await this.client.eval(READ_OR_CREATE, 1, this.key, randomUUID(), IDENTITY_TTL_MS));
    if (sequence <= this.applied) return 'outdated';
    this.applied = sequence;
    const known = this.known;
    this.known = id;
    return known === undefined || known === id ? 'same' : 'changed';
  }

  /** The cache was emptied and starts over: whatever the next read returns is the identity. */
  reset(): void {
    this.known = undefined;
    this.applied = this.sent;
  }
}
