import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import { LockNotAcquiredError, withLock } from '../../lib/locks/index.js';
import { RedisLockProvider, RedisOneTimeTokenStore, recommendedNodeRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

// One-time tokens and locks on a node-redis 6 client (the shared Redis on 6379, a prefix per run).
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each([3, 2] as const)('tokens and locks on node-redis 6 (RESP%s)', (resp) => {
  const client = createClient({ url: 'redis://127.0.0.1:6379', RESP: resp, ...recommendedNodeRedisOptions() });
  beforeAll(async () => {
    await client.connect();
  });
  afterAll(() => client.destroy());

  it('RedisOneTimeTokenStore: of 20 concurrent submissions of one token exactly one is accepted', async () => {
    const tokens = new RedisOneTimeTokenStore(client, { prefix: `test:tok:${randomUUID()}:` });
    expect(await tokens.save('t1', 10_000)).toBe(true);
    expect(await tokens.save('t1', 10_000)).toBe(false);
    const results = await Promise.all(Array.from({ length: 20 }, () => tokens.consume('t1')));
    expect(results.filter((result) => result === 'consumed')).toHaveLength(1);
    expect(results.filter((result) => result === 'already_used')).toHaveLength(19);
    expect(await tokens.consume('never-issued')).toBe('unknown');
    expect(await tokens.save('t2', 10_000)).toBe(true);
    expect(await tokens.revoke('t2')).toBe(true);
    expect(await tokens.consume('t2')).toBe('unknown');
    await tokens.ping();
  });

  it('RedisLockProvider: one holder of 30 concurrent acquirers, and a holder whose lock expired changes nothing', async () => {
    const locks = new RedisLockProvider(client, { prefix: `test:lock:${randomUUID()}:` });
    const handles = await Promise.all(Array.from({ length: 30 }, () => locks.acquire('r', { ttl: 10_000 })));
    const held = handles.filter((handle) => handle !== undefined);
    expect(held).toHaveLength(1);
    expect(await held[0]!.release()).toBe(true);

    const short = (await locks.acquire('s', { ttl: 50 }))!;
    const deadline = Date.now() + 5_000;
    let next = await locks.acquire('s', { ttl: 10_000 });
    while (next === undefined && Date.now() < deadline) {
      await sleep(10);
      next = await locks.acquire('s', { ttl: 10_000 });
    }
    expect(next).toBeDefined();
    expect(await short.release()).toBe(false);
    expect(await short.extend(10_000)).toBe(false);
    expect(await locks.acquire('s', { ttl: 10_000 })).toBeUndefined();
    expect(await next!.release()).toBe(true);
  });

  it('withLock: concurrent critical sections run one at a time; a busy lock gives up with LockNotAcquiredError', async () => {
    const locks = new RedisLockProvider(client, { prefix: `test:lock:${randomUUID()}:` });
    let inside = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 5 }, () =>
        withLock(
          locks,
          'stock',
          async () => {
            most = Math.max(most, ++inside);
            await sleep(5);
            inside--;
          },
          { ttl: 5_000, waitTimeout: 10_000 },
        ),
      ),
    );
    expect(most).toBe(1);
    const holder = (await locks.acquire('busy', { ttl: 10_000 }))!;
    await expect(withLock(locks, 'busy', async () => 'ran', { ttl: 5_000, waitTimeout: 100 })).rejects.toBeInstanceOf(LockNotAcquiredError);
    await holder.release();
  });
});

describe('a lock acquire that fails on a frozen node-redis Redis', () => {
  let server: RedisServerHandle;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('is undone when Redis resumes: the lock is free, not held for nobody until its ttl', async () => {
    const client = createClient({ url: `redis://127.0.0.1:${server.port}`, ...recommendedNodeRedisOptions() });
    client.on('error', () => undefined);
    await client.connect();
    const locks = new RedisLockProvider(client, { prefix: 'lock:', timeout: 300 });
    try {
      server.signal('SIGSTOP');
      try {
        await expect(locks.acquire('r', { ttl: 60_000 })).rejects.toThrow(/did not answer RedisLockProvider.acquire within 300 ms/);
      } finally {
        server.signal('SIGCONT');
      }
      // The SET ran on resuming, and the release sent right behind it on the same connection undid it.
      const deadline = Date.now() + 5_000;
      let handle = await locks.acquire('r', { ttl: 10_000 }).catch(() => undefined);
      while (handle === undefined && Date.now() < deadline) {
        await sleep(20);
        handle = await locks.acquire('r', { ttl: 10_000 }).catch(() => undefined);
      }
      expect(handle).toBeDefined();
    } finally {
      client.destroy();
    }
  });
});
