import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { MemoryIdempotencyStore } from '../../lib/core/memory.store.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';

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

  it('reports evicting an unexpired result, oldest first, and survives a faulty listener', async () => {
    const store = new MemoryIdempotencyStore({ maxEntries: 2 });
    const events: { type: string; key: string }[] = [];
    store.addEventListener(() => {
      throw new Error('faulty listener');
    });
    const stop = store.addEventListener((event) => events.push(event));
    for (const k of ['a', 'b']) {
      await store.claim(k, { token: 't', leaseTtl: 10_000 });
      await store.complete(k, 't', { result: k, ttl: 60_000 });
    }
    expect((await store.claim('c', { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
    expect(events).toEqual([expect.objectContaining({ type: 'evicted_before_expiry', key: 'a' })]);
    expect(await store.get('b')).toMatchObject({ status: 'completed' });
    stop();
    await store.complete('c', 't', { result: 'c', ttl: 60_000 });
    await store.claim('d', { token: 't', leaseTtl: 10_000 });
    expect(events).toHaveLength(1);
    expect(await store.get('b')).toBeUndefined();
  });

  it('rejects a nonsensical maxEntries with a hint', () => {
    expect(() => new MemoryIdempotencyStore({ maxEntries: 0 })).toThrow(IdempotencyConfigurationError);
    expect(() => new MemoryIdempotencyStore({ maxEntries: 0 })).toThrow(
      /MemoryIdempotencyStore: maxEntries must be a whole number above 0/,
    );
    expect(() => new MemoryIdempotencyStore({ maxEntries: 1.5 })).toThrow(
      /maxEntries must be a whole number above 0, got 1\.5\. Write maxEntries: /,
    );
  });
});
