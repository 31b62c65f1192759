import { ExpiringMap, SizedExpiringMap } from '../../lib/core/expiring-map.js';

interface Item {
  expiresAt: number;
}

/** Counts how many entries the map's iterators hand out, across every sweep and eviction. */
class CountingMap extends ExpiringMap<string, Item> {
  steps = 0;
  iterators = 0;

  constructor() {
    super((item) => item.expiresAt);
  }

  override entries(): ReturnType<Map<string, Item>['entries']> {
    const inner = super.entries();
    this.iterators++;
    const next = () => {
      this.steps++;
      return inner.next();
    };
    return {
      next,
      [Symbol.iterator]() {
        return this;
      },
    } as unknown as ReturnType<Map<string, Item>['entries']>;
  }
}

const at = (expiresAt: number): Item => ({ expiresAt });

describe('ExpiringMap', () => {
  it('answers live entries and deletes an expired one when it is read', () => {
    const map = new CountingMap();
    map.set('a', at(100));
    expect(map.live('a', 99)).toEqual(at(100));
    expect(map.live('a', 100)).toBeUndefined();
    expect(map.has('a')).toBe(false);
    expect(map.live('missing', 0)).toBeUndefined();
  });

  it('evicts in insertion order, and a key set again counts as the newest', () => {
    const map = new CountingMap();
    for (const k of ['a', 'b', 'c']) map.set(k, at(1_000));
    map.set('a', at(2_000));
    expect(map.deleteOldest()).toEqual(at(1_000)); // b
    expect([...map.keys()]).toEqual(['c', 'a']);
    expect(map.deleteOldest()).toEqual(at(1_000)); // c
    expect(map.deleteOldest()).toEqual(at(2_000)); // a
    expect(map.deleteOldest()).toBeUndefined();
    expect(map.size).toBe(0);
  });

  it('does not take a key set again for the head, even when the cursor stopped on it', () => {
    const map = new CountingMap();
    map.set('a', at(10));
    map.set('b', at(10));
    map.sweep(0, 1); // the cursor now rests on 'a', which is live
    map.set('a', at(10)); // 'a' moves behind 'b'
    map.sweep(10, 1);
    expect([...map.keys()]).toEqual(['a']);
  });

  it('sweeps at most its budget, from the head, and stops at the first live entry', () => {
    const map = new CountingMap();
    map.set('old1', at(5));
    map.set('old2', at(5));
    map.set('old3', at(5));
    map.set('live', at(50));
    map.set('old4', at(5)); // behind a live entry: left for a later sweep
    map.sweep(10, 2);
    expect([...map.keys()]).toEqual(['old3', 'live', 'old4']);
    map.sweep(10, 5);
    expect([...map.keys()]).toEqual(['live', 'old4']);
  });

  it('passes each entry once across sweeps, however many sweeps find a live head', () => {
    const map = new CountingMap();
    for (let i = 0; i < 10; i++) map.set('k' + i, at(1_000));
    for (let i = 0; i < 10_000; i++) map.sweep(0, 2);
    // A fresh iterator per sweep would hand out the live head 10 000 times (and, in V8,
    // walk every hole that deletions left before it each time).
    expect(map.steps).toBe(1);
    expect(map.iterators).toBe(1);
  });

  it('passes each entry once while a full map evicts on every write', () => {
    const map = new CountingMap();
    const capacity = 1_000;
    const writes = 20_000;
    for (let i = 0; i < capacity; i++) map.set('k' + i, at(1_000));
    for (let i = capacity; i < capacity + writes; i++) {
      map.sweep(0, 2);
      if (map.size >= capacity) map.deleteOldest();
      map.set('k' + i, at(1_000));
    }
    expect(map.size).toBe(capacity);
    expect(map.keys().next().value).toBe('k' + writes);
    // One step per eviction (each evicted entry handed out exactly once), and one
    // iterator for the whole run.
    expect(map.steps).toBe(writes);
    expect(map.iterators).toBe(1);
  });

  it('starts over after it was emptied, and after clear()', () => {
    const map = new CountingMap();
    map.set('a', at(5));
    map.sweep(10, 2);
    expect(map.size).toBe(0);
    map.set('b', at(5));
    map.sweep(10, 2);
    expect(map.size).toBe(0);
    map.set('c', at(50));
    map.sweep(10, 2);
    map.clear();
    map.set('d', at(5));
    map.set('e', at(50));
    map.sweep(10, 2);
    expect([...map.keys()]).toEqual(['e']);
  });

  it('keeps an entry changed in place where it is (a lock extended), so sweeping stops at it', () => {
    const map = new CountingMap();
    const lock = at(5);
    map.set('lock', lock);
    map.set('other', at(5));
    lock.expiresAt = 50;
    map.sweep(10, 2);
    expect([...map.keys()]).toEqual(['lock', 'other']);
  });
});

describe("SizedExpiringMap (the near cache's entries)", () => {
  interface Sized {
    expiresAt: number;
    bytes: number;
  }
  const sized = (expiresAt: number, bytes: number): Sized => ({ expiresAt, bytes });
  const newMap = () =>
    new SizedExpiringMap<string, Sized>(
      (value) => value.expiresAt,
      (value) => value.bytes,
    );

  it('counts the size of its values through set, overwrite, delete and clear', () => {
    const map = newMap();
    map.set('a', sized(50, 100));
    map.set('b', sized(50, 10));
    expect(map.totalSize).toBe(110);
    map.set('a', sized(50, 7));
    expect(map.totalSize).toBe(17);
    expect(map.delete('b')).toBe(true);
    expect(map.delete('b')).toBe(false);
    expect(map.totalSize).toBe(7);
    map.clear();
    expect(map.totalSize).toBe(0);
    expect(map.size).toBe(0);
  });

  it('counts what sweep, live and deleteOldest remove', () => {
    const map = newMap();
    map.set('old', sized(5, 1));
    map.set('stale', sized(5, 2));
    map.set('fresh', sized(50, 4));
    map.set('later', sized(60, 8));
    map.sweep(10, 1);
    expect(map.totalSize).toBe(14);
    expect(map.live('stale', 10)).toBeUndefined();
    expect(map.totalSize).toBe(12);
    expect(map.deleteOldest()).toEqual(sized(50, 4));
    expect([...map.keys()]).toEqual(['later']);
    expect(map.totalSize).toBe(8);
  });

  it('keeps the order and expiry rules of ExpiringMap: a key set again moves to the end', () => {
    const map = newMap();
    map.set('a', sized(5, 1));
    map.set('b', sized(5, 1));
    map.set('a', sized(50, 1));
    map.sweep(10, 5);
    expect([...map.keys()]).toEqual(['a']);
    expect(map.totalSize).toBe(1);
  });
});
