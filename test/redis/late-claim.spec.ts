import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';

// A claim that failed for its caller is undone by a release (core/orphan-claims.ts). When
// the connection that carried the claim is dropped, the client may send the claim again
// after it reconnects (ioredis resends unfulfilled commands; a Cluster retries a command
// whose connection closed), after that release: the release leaves a marker, so the late
// claim locks nothing (issue 42; before it, the key stayed locked for a lease).
describe('RedisIdempotencyStore: a claim that arrives after its own release', () => {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  const store = new RedisIdempotencyStore(client, { prefix: `test:late:${randomUUID()}:` });
  beforeAll(() => store.verify());
  afterAll(() => client.disconnect());

  it('locks nothing, and the key is claimed at once by the retry with its own token', async () => {
    const key = randomUUID();
    expect(await store.release(key, 'late')).toBe(false);
    const late = await store.claim(key, { token: 'late', leaseTtl: 30_000 });
    expect(late.claimed).toBe(false);
    expect(await store.get(key)).toBeUndefined();
    const retry = await store.claim(key, { token: 'retry', leaseTtl: 30_000 });
    expect(retry).toMatchObject({ claimed: true, record: { status: 'in_progress', leaseToken: 'retry' } });
    expect(await store.complete(key, 'retry', { result: 'r', ttl: 30_000 })).toBe(true);
    expect(await store.get(key)).toMatchObject({ status: 'completed', result: 'r', leaseToken: 'retry' });
  });

  it('locks nothing when it arrives again after the release that undid it (resent on another connection)', async () => {
    const key = randomUUID();
    expect((await store.claim(key, { token: 'a', leaseTtl: 30_000 })).claimed).toBe(true);
    expect(await store.release(key, 'other')).toBe(false);
    expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: 'a' });
    expect(await store.release(key, 'a')).toBe(true);
    expect(await store.get(key)).toBeUndefined();
    expect((await store.claim(key, { token: 'a', leaseTtl: 30_000 })).claimed).toBe(false);
    expect(await store.get(key)).toBeUndefined();
    // A delete finds no record (the marker is not one), and removes the marker.
    expect(await store.delete(key)).toBe(false);
    expect((await store.claim(key, { token: 'b', leaseTtl: 30_000 })).claimed).toBe(true);
  });

  // Duplicates of one key during an outage: each failed claim is undone by its own
  // release, in any order with the others, and any of them may still arrive late.
  // One shared marker was overwritten by the next release, and the late claim it had
  // undone then locked the key for a lease nobody owned (Redis Cluster fault run, CI).
  it('locks nothing when several claims of one key were undone, whichever release came last', async () => {
    const key = randomUUID();
    expect(await store.release(key, 'a')).toBe(false);
    expect(await store.release(key, 'b')).toBe(false);
    expect((await store.claim(key, { token: 'a', leaseTtl: 30_000 })).claimed).toBe(false);
    expect((await store.claim(key, { token: 'b', leaseTtl: 30_000 })).claimed).toBe(false);
    expect(await store.get(key)).toBeUndefined();
    expect((await store.claim(key, { token: 'retry', leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('keeps the marker of an earlier undone claim when a later one is released from its own lease', async () => {
    const key = randomUUID();
    // b's claim ran first and b's release freed it; a's claim (a duplicate) is still on its way.
    expect(await store.release(key, 'a')).toBe(false);
    expect((await store.claim(key, { token: 'b', leaseTtl: 30_000 })).claimed).toBe(true);
    expect(await store.release(key, 'b')).toBe(true);
    expect((await store.claim(key, { token: 'a', leaseTtl: 30_000 })).claimed).toBe(false);
    expect((await store.claim(key, { token: 'b', leaseTtl: 30_000 })).claimed).toBe(false);
    expect(await store.get(key)).toBeUndefined();
    const retry = await store.claim(key, { token: 'retry', leaseTtl: 30_000 });
    expect(retry).toMatchObject({ claimed: true, record: { status: 'in_progress', leaseToken: 'retry' } });
  });
});
