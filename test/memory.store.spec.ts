import { MemoryIdempotencyStore } from '../lib/stores/memory.store.js';
import { describeStoreContract } from '../lib/testing/store-contract.js';

describeStoreContract('MemoryIdempotencyStore', async () => ({ store: new MemoryIdempotencyStore() }));

describe('MemoryIdempotencyStore bounds', () => {
  it('holds at most maxEntries records after 100 000 unique keys', async () => {
    const store = new MemoryIdempotencyStore({ maxEntries: 1000 });
    let max = 0;
    for (let i = 0; i < 100_000; i++) {
      const key = 'k' + i;
      await store.claim(key, { token: 't', leaseTtl: 10_000 });
      await store.complete(key, 't', { result: 'r' + i, ttl: 60_000 });
      if (store.size > max) max = store.size;
    }
    expect(max).toBeLessThanOrEqual(1000);
    expect(store.size).toBe(1000);
    // The newest survive, the oldest were evicted.
    expect(await store.get('k99999')).toMatchObject({ status: 'completed', result: 'r99999' });
    expect(await store.get('k0')).toBeUndefined();
  });

  it('never evicts a running lease to make room, and refuses instead', async () => {
    const store = new MemoryIdempotencyStore({ maxEntries: 3 });
    for (const k of ['a', 'b', 'c']) expect((await store.claim(k, { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
    await expect(store.claim('d', { token: 't', leaseTtl: 10_000 })).rejects.toThrow(/full.*maxEntries/);
    for (const k of ['a', 'b', 'c']) expect((await store.get(k))?.status).toBe('in_progress');
    // Completing one frees room for a new key by evicting the completed one.
    await store.complete('a', 't', { result: 'x', ttl: 10_000 });
    expect((await store.claim('d', { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
    expect(await store.get('a')).toBeUndefined();
    expect((await store.get('b'))?.status).toBe('in_progress');
  });

  it('rejects a nonsensical maxEntries with a hint', () => {
    expect(() => new MemoryIdempotencyStore({ maxEntries: 0 })).toThrow(/maxEntries must be a positive integer/);
  });
});
