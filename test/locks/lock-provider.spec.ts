import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
import {
  LockLostError,
  LockNotAcquiredError,
  MemoryLockProvider,
  withLock,
  type LockHandle,
  type LockProvider,
} from '../../lib/locks/index.js';
import { RedisLockProvider, recommendedRedisOptions } from '../../lib/redis/index.js';
import { IdempotencyConfigurationError, IdempotencyErrorCode } from '../../lib/core/errors.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` until it returns a value (not undefined), failing after `timeoutMs`. */
async function poll<T>(probe: () => Promise<T | undefined> | T | undefined, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** The provider as it is, counting the successful extensions of the handles it grants. */
function countingExtensions(provider: LockProvider) {
  const seen = { extended: 0, firstExpiry: 0 };
  const counting: LockProvider = {
    async acquire(resource, options) {
      const handle = await provider.acquire(resource, options);
      if (!handle) return undefined;
      seen.firstExpiry = handle.expiresAt;
      const counted: LockHandle = {
        resource: handle.resource,
        token: handle.token,
        get expiresAt() {
          return handle.expiresAt;
        },
        async extend(ttl) {
          const extended = await handle.extend(ttl);
          if (extended) seen.extended++;
          return extended;
        },
        release: () => handle.release(),
      };
      return counted;
    },
  };
  return { seen, provider: counting };
}
/** Blocks the event loop, like a long GC pause: no timer (no renewal) can run meanwhile. */
function stall(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy
  }
}

const clients: { disconnect(): void }[] = [];
afterAll(() => {
  for (const client of clients) client.disconnect();
});

const providers: [string, () => Promise<LockProvider>][] = [
  ['MemoryLockProvider', async () => new MemoryLockProvider()],
  [
    'RedisLockProvider (ioredis 6)',
    async () => {
      const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
      clients.push(client);
      await client.connect();
      return new RedisLockProvider(client, { prefix: `test:lock:${randomUUID()}:` });
    },
  ],
  [
    'RedisLockProvider (ioredis 5)',
    async () => {
      const client = new Redis5({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
      clients.push(client);
      await client.connect();
      return new RedisLockProvider(client, { prefix: `test:lock:${randomUUID()}:` });
    },
  ],
];

describe.each(providers)('%s', (_name, makeProvider) => {
  let locks: LockProvider;
  const resource = () => `res-${randomUUID()}`;

  beforeAll(async () => {
    locks = await makeProvider();
  });

  it('grants a lock to exactly one of 50 concurrent acquirers, and again after release', async () => {
    const r = resource();
    const handles = await Promise.all(Array.from({ length: 50 }, () => locks.acquire(r, { ttl: 10_000 })));
    const winners = handles.filter((h) => h !== undefined);
    expect(winners).toHaveLength(1);
    expect(await locks.acquire(r, { ttl: 10_000 })).toBeUndefined();
    expect(await winners[0]!.release()).toBe(true);
    expect(await winners[0]!.release()).toBe(false);
    expect(await locks.acquire(r, { ttl: 10_000 })).toBeDefined();
  });

  it("never lets a holder whose lock expired release or extend the new holder's lock", async () => {
    const r = resource();
    const stale = (await locks.acquire(r, { ttl: 150 }))!;
    const current = await poll(() => locks.acquire(r, { ttl: 10_000 }), 'the stale lock to expire');
    expect(await stale.release()).toBe(false);
    expect(await stale.extend(10_000)).toBe(false);
    expect(await locks.acquire(r, { ttl: 10_000 })).toBeUndefined();
    expect(await current!.release()).toBe(true);
  });

  it('keeps an extended lock past its first expiry', async () => {
    const r = resource();
    const handle = (await locks.acquire(r, { ttl: 200 }))!;
    const firstExpiry = handle.expiresAt;
    expect(await handle.extend(5_000)).toBe(true);
    expect(handle.expiresAt).toBeGreaterThan(firstExpiry);
    // Past the first expiry on this clock, with room for the store's own clock to agree.
    await poll(() => (Date.now() > firstExpiry + 100 ? true : undefined), 'the first expiry to pass');
    expect(await locks.acquire(r, { ttl: 1_000 })).toBeUndefined();
    expect(await handle.release()).toBe(true);
  });

  it('withLock: runs concurrent critical sections one at a time', async () => {
    const r = resource();
    let active = 0;
    let maxActive = 0;
    let counter = 0;
    await Promise.all(
      Array.from({ length: 20 }, () =>
        withLock(
          locks,
          r,
          async () => {
            active++;
            maxActive = Math.max(maxActive, active);
            const read = counter;
            await sleep(2);
            counter = read + 1;
            active--;
          },
          { ttl: 5_000, waitTimeout: 20_000, retryDelay: 5 },
        ),
      ),
    );
    expect(maxActive).toBe(1);
    expect(counter).toBe(20);
  });

  it('withLock: gives up after waitTimeout with LockNotAcquiredError, without running the work', async () => {
    const r = resource();
    const holder = (await locks.acquire(r, { ttl: 10_000 }))!;
    let ran = false;
    const error = await withLock(locks, r, async () => (ran = true), { waitTimeout: 200, retryDelay: 20 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect(error).toMatchObject({ code: IdempotencyErrorCode.LockNotAcquired, status: 409, resource: r, waitTimeout: 200 });
    expect((error as Error).message).toContain(r);
    expect(ran).toBe(false);
    await holder.release();
  });

  it('withLock: waits for a busy lock that is released in time', async () => {
    const r = resource();
    const holder = (await locks.acquire(r, { ttl: 10_000 }))!;
    setTimeout(() => void holder.release(), 100);
    await expect(withLock(locks, r, async () => 'done', { waitTimeout: 5_000, retryDelay: 10 })).resolves.toBe('done');
  });

  it('withLock: renews the lock while long work runs, and releases it afterwards', async () => {
    const r = resource();
    const { seen, provider } = countingExtensions(locks);
    let contenderGotIt: boolean | undefined;
    await withLock(
      provider,
      r,
      async () => {
        // Held past its first expiry through two renewals: without them it would have lapsed.
        await poll(
          () => (seen.extended >= 2 && Date.now() > seen.firstExpiry + 100 ? true : undefined),
          'two renewals past the first expiry',
        );
        contenderGotIt = (await locks.acquire(r, { ttl: 1_000 })) !== undefined;
      },
      { ttl: 600 },
    );
    expect(contenderGotIt).toBe(false);
    const after = await locks.acquire(r, { ttl: 1_000 });
    expect(after).toBeDefined();
    await after!.release();
  });

  it('withLock: releases the lock when the work throws, and rethrows', async () => {
    const r = resource();
    await expect(withLock(locks, r, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    const after = await locks.acquire(r, { ttl: 1_000 });
    expect(after).toBeDefined();
    await after!.release();
  });

  it('withLock: aborts the signal with LockLostError when the lock lapsed during a stall', async () => {
    const r = resource();
    let signal: AbortSignal | undefined;
    let takenOver = false;
    await withLock(
      locks,
      r,
      async (s) => {
        signal = s;
        stall(450); // no renewal can run: the 150 ms lock lapses
        takenOver = (await locks.acquire(r, { ttl: 10_000 })) !== undefined;
        await poll(() => (s.aborted ? true : undefined), 'the late renewal to find the lock gone');
      },
      { ttl: 150 },
    );
    expect(takenOver).toBe(true);
    expect(signal!.aborted).toBe(true);
    expect(signal!.reason).toBeInstanceOf(LockLostError);
    // The lapsed holder's release did not free the new holder's lock.
    expect(await locks.acquire(r, { ttl: 1_000 })).toBeUndefined();
  });

  it('rejects nonsensical arguments with a hint', async () => {
    await expect(locks.acquire('', { ttl: 1_000 })).rejects.toThrow(/resource must be a non-empty string/);
    await expect(locks.acquire('', { ttl: 1_000 })).rejects.toThrow(IdempotencyConfigurationError);
    await expect(locks.acquire('r', { ttl: 0 })).rejects.toThrow(/ttl must be a whole number of milliseconds above 0/);
    await expect(locks.acquire('r', { ttl: 0 })).rejects.toThrow(IdempotencyConfigurationError);
    await expect(locks.acquire('r', {} as never)).rejects.toThrow(/ttl is required/);
    await expect(withLock(locks, 'r', async () => 1, { waitTimeout: -1 })).rejects.toThrow(/waitTimeout must be/);
    await expect(withLock(locks, 'r', async () => 1, { waitTimeout: -1 })).rejects.toThrow(IdempotencyConfigurationError);
    await expect(withLock(locks, 'r', async () => 1, { ttl: 1.5 })).rejects.toThrow(/withLock: ttl must be a whole number of milliseconds/);
  });
});

describe('lock errors', () => {
  it('carry their own title and code', () => {
    expect(new LockNotAcquiredError('r', 100)).toMatchObject({
      title: 'Lock not acquired',
      code: IdempotencyErrorCode.LockNotAcquired,
      status: 409,
    });
    expect(new LockLostError('r')).toMatchObject({ title: 'Lock lost', code: IdempotencyErrorCode.LockLost, status: 409 });
  });
});
