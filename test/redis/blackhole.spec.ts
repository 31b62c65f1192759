import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import type { IdempotencyEvent } from '../../lib/core/events.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions, recommendedRedisOptions } from '../../lib/redis/index.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';

/**
 * A path that drops every byte of the connections open during the fault, for good
 * (issue 42): the client must not stay on its dead socket. node-redis has no reply
 * timeout, and an ioredis client without `socketTimeout` none that drops a connection:
 * the store's watchdog (connection-watchdog.ts) drops it. Store timeout 500 ms, so each
 * case takes about a second.
 */
const TIMEOUT = 500;

describe('RedisIdempotencyStore on a blackholed path', () => {
  let proxy: FaultProxy;
  const closers: (() => unknown)[] = [];
  beforeEach(async () => {
    proxy = await startFaultProxy({ host: '127.0.0.1', port: 6379 });
  });
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
    await proxy.stop();
  });

  /** Claims new keys until one is claimed, within `withinMs`; the time it took. */
  async function untilServed(store: RedisIdempotencyStore, withinMs: number): Promise<number> {
    const startedAt = Date.now();
    for (;;) {
      const claimed = await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 }).then(
        (result) => result.claimed,
        () => false,
      );
      if (claimed) return Date.now() - startedAt;
      if (Date.now() - startedAt > withinMs) throw new Error(`no claim served within ${withinMs} ms of the heal`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  async function blackholeThenHeal(store: RedisIdempotencyStore): Promise<{ recoveryMs: number; drops: string[] }> {
    const drops: string[] = [];
    store.addEventListener((event: IdempotencyEvent) => event.type === 'store_error' && drops.push(String(event.reason)));
    expect((await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
    const accepted = proxy.stats.accepted;
    proxy.blackhole();
    await expect(store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 })).rejects.toThrow();
    // The client opens a new connection once its dead one is dropped; made during the fault, it is dead too.
    const reconnected = proxy.waitFor('connection', () => proxy.stats.accepted > accepted, 5_000);
    while (proxy.stats.accepted === accepted) {
      await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 }).catch(() => undefined);
      await Promise.race([reconnected, new Promise((resolve) => setTimeout(resolve, 50))]);
    }
    await reconnected;
    await proxy.heal();
    const recoveryMs = await untilServed(store, 5_000);
    return { recoveryMs, drops };
  }

  it('node-redis (recommendedNodeRedisOptions()): the watchdog destroys and connects the client again; served within 5 s of the heal', async () => {
    const client = createClient({ url: `redis://127.0.0.1:${proxy.port}`, ...recommendedNodeRedisOptions() });
    client.on('error', () => undefined);
    await client.connect();
    closers.push(() => client.destroy());
    const store = new RedisIdempotencyStore(client, { prefix: `test:bh:${randomUUID()}:`, timeout: TIMEOUT });
    const { recoveryMs, drops } = await blackholeThenHeal(store);
    console.log(`node-redis: served ${recoveryMs} ms after the heal`);
    expect(client.isReady).toBe(true);
    expect(drops[0]).toMatch(
      /RedisIdempotencyStore: Redis connection dropped: no reply on its connection for \d+ ms while calls waited; the client was destroyed and connected again/,
    );
  }, 20_000);

  it('ioredis without socketTimeout: the watchdog disconnects it (it reconnects by itself); served within 5 s of the heal', async () => {
    const client = new Redis({ ...proxy.address, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    await client.connect();
    closers.push(() => client.disconnect());
    const store = new RedisIdempotencyStore(client, { prefix: `test:bh:${randomUUID()}:`, timeout: TIMEOUT });
    const { recoveryMs, drops } = await blackholeThenHeal(store);
    console.log(`ioredis (no socketTimeout): served ${recoveryMs} ms after the heal`);
    expect(drops[0]).toMatch(/Redis connection dropped: .*; the client reconnects \(ioredis disconnect\(true\)\)/);
  }, 20_000);

  it('ioredis with recommendedRedisOptions(): its socketTimeout drops the dead connection; served within 5 s of the heal', async () => {
    const client = new Redis({
      ...proxy.address,
      lazyConnect: true,
      ...recommendedRedisOptions({ commandTimeout: 300, socketTimeout: 600 }),
    });
    client.on('error', () => undefined);
    await client.connect();
    closers.push(() => client.disconnect());
    // timeout 0: the store leaves the bound to the client, so only ioredis's own socketTimeout acts.
    const store = new RedisIdempotencyStore(client, { prefix: `test:bh:${randomUUID()}:`, timeout: 0 });
    const { recoveryMs, drops } = await blackholeThenHeal(store);
    console.log(`ioredis (socketTimeout): served ${recoveryMs} ms after the heal`);
    expect(drops).toEqual([]);
  }, 20_000);

  it('recommendedRedisOptions(): socketTimeout is the larger of 2 s and commandTimeout, or as given', () => {
    expect(recommendedRedisOptions().socketTimeout).toBe(2_000);
    expect(recommendedRedisOptions({ commandTimeout: 3_000 }).socketTimeout).toBe(3_000);
    expect(recommendedRedisOptions({ socketTimeout: 900 }).socketTimeout).toBe(900);
    expect(() => recommendedRedisOptions({ socketTimeout: 1.5 })).toThrow(/socketTimeout/);
  });
});
