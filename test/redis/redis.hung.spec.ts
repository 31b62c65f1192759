import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { IdempotencyStoreUnavailableError, type IdempotencyEvent, type IdempotencyStore } from '../../lib/index.js';
import { IdempotencyEngine, storageKeyOf, type ExecutionPolicy } from '../../lib/core/index.js';
import { RedisIdempotencyStore, RedisLockProvider, recommendedRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * A hung Redis (SIGSTOP: the connection stays open, nothing answers). Commands written
 * meanwhile wait in the socket and run when Redis resumes (SIGCONT), after their callers
 * were already told that they failed.
 */
const COMMAND_TIMEOUT = 300;

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const answers = (store: RedisIdempotencyStore) => () =>
  store.ping().then(
    () => true,
    () => false,
  );

describe('RedisIdempotencyStore on a Redis that hangs, then resumes', () => {
  let server: RedisServerHandle;
  const clients: Redis[] = [];
  let frozen = false;

  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterEach(() => {
    if (frozen) server.signal('SIGCONT');
    frozen = false;
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await server?.stop();
  });

  function freeze(): void {
    server.signal('SIGSTOP');
    frozen = true;
  }
  function resume(): void {
    server.signal('SIGCONT');
    frozen = false;
  }

  async function newStore(prefix: string): Promise<RedisIdempotencyStore> {
    return new RedisIdempotencyStore(await newClient(), { prefix });
  }

  async function newClient(): Promise<Redis> {
    const client = new Redis({
      host: '127.0.0.1',
      port: server.port,
      lazyConnect: true,
      ...recommendedRedisOptions({ commandTimeout: COMMAND_TIMEOUT, maxReconnectDelay: 200 }),
    });
    client.on('error', () => undefined); // timeouts are expected here; the commands report them
    clients.push(client);
    await client.connect();
    return client;
  }

  function policy(store: IdempotencyStore, events: IdempotencyEvent[] = [], leaseTtl = 30_000): ExecutionPolicy {
    return {
      store,
      ttl: 60_000,
      leaseTtl,
      inFlight: 'reject',
      waitTimeout: 0,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1 << 20,
      onEvent: (event) => events.push(event),
    };
  }

  it('runs a key answered 503 during the hang at the first retry after Redis answers again, from any instance', async () => {
    const prefix = `hung:${randomUUID()}:`;
    const store = await newStore(prefix);
    const engine = new IdempotencyEngine();
    // Another instance (its own connection and engine), so the retry cannot lean on what
    // the first engine remembers about its failed claims.
    const otherStore = await newStore(prefix);
    const otherEngine = new IdempotencyEngine();
    let runs = 0;
    const handler = async () => ++runs;
    // Warm up, so the scripts travel as EVALSHA like in steady state.
    await engine.execute({ key: storageKeyOf('hung', randomUUID()) }, policy(store), handler);
    await expect(
      engine.execute({ key: storageKeyOf('hung', randomUUID()) }, policy(store), () => Promise.reject(new Error('warm release'))),
    ).rejects.toThrow('warm release');
    const runsBefore = runs;

    const keys = Array.from({ length: 30 }, () => storageKeyOf('hung', randomUUID()));
    freeze();
    const during = await Promise.allSettled(keys.map((key) => engine.execute({ key }, policy(store), handler)));
    for (const outcome of during) {
      expect(outcome.status === 'rejected' && outcome.reason).toBeInstanceOf(IdempotencyStoreUnavailableError);
    }
    expect(runs).toBe(runsBefore);
    resume();

    // PING travels behind the late claims on the same connection: once it answers, they ran.
    await until(answers(store), 'Redis to answer again');
    const after = await Promise.allSettled(keys.map((key) => otherEngine.execute({ key }, policy(otherStore), handler)));
    const refused = after.filter((outcome) => outcome.status === 'rejected');
    expect(refused.map((outcome) => (outcome as PromiseRejectedResult).reason)).toEqual([]);
    expect(runs).toBe(runsBefore + keys.length);
  }, 30_000);

  it('reports a complete whose reply was lost, then retried, as completed and not lease_lost', async () => {
    const store = await newStore(`hung:${randomUUID()}:`);
    const engine = new IdempotencyEngine();
    const key = storageKeyOf('hung-complete', randomUUID());
    const events: IdempotencyEvent[] = [];
    let runs = 0;
    const first = await engine.execute({ key }, policy(store, events), async () => {
      runs++;
      freeze(); // the complete that follows reaches Redis, its reply does not come back in time
      return 'charged';
    });
    expect(first).toEqual({ value: 'charged', replayed: false });
    expect(events.filter((e) => e.type === 'store_error')).not.toHaveLength(0);
    resume();

    await until(() => events.some((e) => e.type === 'completed' || e.type === 'lease_lost'), 'the complete retry to settle');
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    expect(events.filter((e) => e.type === 'completed')).toHaveLength(1);
    expect(await engine.execute({ key }, policy(store), async () => ++runs)).toEqual({ value: 'charged', replayed: true });
    expect(runs).toBe(1);
  }, 30_000);

  it('keeps retrying the complete for as long as the renewed lease lasts: a handler longer than leaseTtl still stores its result', async () => {
    const leaseTtl = 3_000;
    const store = await newStore(`hung:${randomUUID()}:`);
    const engine = new IdempotencyEngine();
    const key = storageKeyOf('hung-renewed', randomUUID());
    const events: IdempotencyEvent[] = [];
    let runs = 0;
    const first = await engine.execute({ key }, policy(store, events, leaseTtl), async () => {
      runs++;
      const claimedAt = Date.now();
      const claimed = await store.get(key);
      const firstExpiry = claimed?.status === 'in_progress' ? claimed.leaseExpiresAt : Infinity;
      // Outlive the first lease, and see it renewed in Redis: the lease held through renewals only.
      await until(async () => {
        const record = await store.get(key);
        return Date.now() > claimedAt + leaseTtl && record?.status === 'in_progress' && record.leaseExpiresAt > firstExpiry;
      }, 'a renewal past the first lease');
      freeze(); // a brief store failure while the result is stored
      return 'shipped';
    });
    expect(first).toEqual({ value: 'shipped', replayed: false });
    expect(events.filter((e) => e.type === 'store_error')).not.toHaveLength(0);
    resume();

    await until(() => events.some((e) => e.type === 'completed' || e.type === 'lease_lost'), 'the complete retry to settle');
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    expect(await engine.execute({ key }, policy(store, [], leaseTtl), async () => ++runs)).toEqual({ value: 'shipped', replayed: true });
    expect(runs).toBe(1);
  }, 30_000);

  it('frees a lock whose acquire failed during the hang as soon as Redis answers again', async () => {
    const prefix = `hung:lock:${randomUUID()}:`;
    const client = await newClient();
    const locks = new RedisLockProvider(client, { prefix });
    const otherLocks = new RedisLockProvider(await newClient(), { prefix });
    const resources = Array.from({ length: 10 }, () => `inventory-${randomUUID()}`);
    // Warm up, so the scripts travel as EVALSHA like in steady state.
    await (await locks.acquire(`warm-${randomUUID()}`, { ttl: 30_000 }))!.release();

    freeze();
    const during = await Promise.allSettled(resources.map((resource) => locks.acquire(resource, { ttl: 30_000 })));
    expect(during.map((outcome) => outcome.status)).toEqual(resources.map(() => 'rejected'));
    resume();

    await until(
      () =>
        client.ping().then(
          () => true,
          () => false,
        ),
      'Redis to answer again',
    );
    const after = await Promise.all(resources.map((resource) => otherLocks.acquire(resource, { ttl: 30_000 })));
    expect(after.filter((handle) => handle === undefined)).toHaveLength(0);
    await Promise.all(after.map((handle) => handle!.release()));
  }, 30_000);
});
