/**
 * An insertion-ordered Map whose entries expire, with O(1) work per call at its head:
 * the process-local stores (idempotency records, one-time tokens, locks) drop a few
 * expired entries from the head on each write and, when full, evict the oldest.
 *
 * `set` always appends (a key already present moves to the end), so the head holds
 * the entry written longest ago. An entry's expiry may be changed in place (a lock
 * extended) without moving it: the sweep then stops at it a little early, which only
 * delays dropping the entries behind it.
 *
 * The head is read through a cursor that lives across calls. A V8 Map keeps deleted
 * entries as holes until it rehashes, and a fresh iterator walks over every hole from
 * the start: with a full store that evicts on every write, that made each write scan
 * thousands of holes. A cursor passes each hole once.
 *
 * It has no capacity of its own: the memory idempotency store bounds two maps together
 * and evicts only completed records, locks are never evicted (that would grant a held
 * lock twice), and the Redis near cache bounds entries and bytes (`SizedExpiringMap`),
 * so each owner applies its own bound with `deleteOldest`.
 *
 * Not part of the public API.
 */
export class ExpiringMap<K, V> extends Map<K, V> {
  // Map iterators stay valid while the map changes and see entries added later.
  private cursor: Iterator<[K, V]> | undefined;
  // The entry the cursor stopped at: the oldest one, as long as it is still in the map.
  private current: [K, V] | undefined;

  constructor(private readonly expiryOf: (value: V) => number) {
    super();
  }

  /** Appends the entry; a key already present moves to the end. */
  override set(key: K, value: V): this {
    // The cursor has passed this key's old slot: re-set, it must not count as the head.
    if (this.current !== undefined && this.current[0] === key) this.current = undefined;
    super.delete(key);
    return super.set(key, value);
  }

  override clear(): void {
    super.clear();
    this.cursor = undefined;
    this.current = undefined;
  }

  /** The value under `key` if it has not expired at `now`; an expired one is deleted. */
  live(key: K, now: number): V | undefined {
    const value = this.get(key);
    if (value === undefined) return undefined;
    if (this.expiryOf(value) > now) return value;
    this.delete(key);
    return undefined;
  }

  /** Deletes up to `budget` expired entries from the head; stops at the first live one. */
  sweep(now: number, budget: number): void {
    while (budget-- > 0) {
      const entry = this.head();
      if (entry === undefined || this.expiryOf(entry[1]) > now) return;
      this.delete(entry[0]);
    }
  }

  /** Deletes the oldest entry and returns its value; undefined when the map is empty. */
  deleteOldest(): V | undefined {
    const entry = this.head();
    if (entry === undefined) return undefined;
    this.delete(entry[0]);
    return entry[1];
  }

  /** The oldest entry still in the map, or undefined when it is empty. */
  private head(): [K, V] | undefined {
    for (;;) {
      // Stale once its key is deleted (a key set again is dropped by `set` itself).
      if (this.current !== undefined && this.get(this.current[0]) === this.current[1]) return this.current;
      this.cursor ??= this.entries();
      const next = this.cursor.next();
      if (next.done) {
        // An exhausted iterator never sees later entries: start a new one next time.
        this.cursor = undefined;
        this.current = undefined;
        return undefined;
      }
      this.current = next.value;
    }
  }
}

/**
 * An `ExpiringMap` that keeps the total size of its values (`sizeOf`, e.g. bytes) up to
 * date through every write, delete, sweep, eviction and clear, for an owner bounded by
 * size as well as by count (the Redis near cache).
 */
export class SizedExpiringMap<K, V> extends ExpiringMap<K, V> {
  private total = 0;

  constructor(
    expiryOf: (value: V) => number,
    private readonly sizeOf: (value: V) => number,
  ) {
    super(expiryOf);
  }

  /** The sum of `sizeOf` over the values in the map. */
  get totalSize(): number {
    return this.total;
  }

  override set(key: K, value: V): this {
    const old = this.get(key);
    if (old !== undefined) this.total -= this.sizeOf(old);
    this.total += this.sizeOf(value);
    return super.set(key, value);
  }

  override delete(key: K): boolean {
    const old = this.get(key);
    if (!super.delete(key)) return false;
    if (old !== undefined) this.total -= this.sizeOf(old);
    return true;
  }

  override clear(): void {
    super.clear();
    this.total = 0;
  }
}
