import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { IdempotencyInFlightError, MemoryIdempotencyStore, type IdempotencyEvent, type IdempotencyStore } from '../../lib/index.js';
import { IdempotencyEngine, type Admission, type ExecutionPolicy } from '../../lib/core/engine.js';
import type { Lease } from '../../lib/core/lease.js';
import { deserializeOutcome, valueOutcome, type StoredOutcome } from '../../lib/core/outcome.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';

/**
 * A lease (lib/core/lease.ts) from its claim to its one settlement: complete, fail,
 * release or abandon, each a compare-and-set on the lease token, settled once; and its
 * renewals while the handler runs. On the real memory store and on Redis, whose
 * compare-and-set is its own Lua script.
 */

interface Run {
  readonly engine: IdempotencyEngine;
  readonly events: IdempotencyEvent[];
  policy(overrides?: Partial<ExecutionPolicy>): ExecutionPolicy;
}

function setup(store: IdempotencyStore): Run {
  const events: IdempotencyEvent[] = [];
  return {
    engine: new IdempotencyEngine(),
    events,
    policy: (overrides = {}) => ({
      store,
      ttl: 60_000,
      leaseTtl: 30_000,
      inFlight: 'reject',
      waitTimeout: 0,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1 << 20,
      onEvent: (event) => events.push(event),
      ...overrides,
    }),
  };
}

const types = (events: IdempotencyEvent[]) => events.map((event) => event.type);
const newKey = () => `lease-spec:${randomUUID()}`;

function leaseOf(admission: Admission): Lease {
  if (admission.kind !== 'execute') throw new Error(`expected an execution, got ${admission.kind}`);
  return admission.lease;
}

async function storedOutcome(store: IdempotencyStore, key: string): Promise<StoredOutcome> {
  const record = await store.get(key);
  if (record?.status !== 'completed') throw new Error(`expected a completed record, got ${record?.status}`);
  return deserializeOutcome(record.result);
}

let redis: Redis;
beforeAll(async () => {
  redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await redis.connect();
});
afterAll(() => redis.disconnect());

const stores: [string, () => IdempotencyStore][] = [
  ['memory', () => new MemoryIdempotencyStore()],
  ['Redis', () => new RedisIdempotencyStore(redis, { prefix: `test:lease-spec:${randomUUID()}:` })],
];

describe.each(stores)('Lease on the %s store', (_name, makeStore) => {
  let store: IdempotencyStore;
  let run: Run;
  beforeEach(() => {
    store = makeStore();
    run = setup(store);
  });

  describe('complete', () => {
    it('stores the outcome for replay, under the ttl', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy()));
      await lease.complete(valueOutcome({ id: 1 }, 'json'));
      expect(await storedOutcome(store, key)).toEqual(valueOutcome({ id: 1 }, 'json'));
      const record = await store.get(key);
      expect(record?.status === 'completed' && record.expiresAt - Date.now()).toBeGreaterThan(50_000);
      expect(types(run.events)).toEqual(['claimed', 'completed']);
    });

    it('stores an outcome over maxResponseBytes as not replayable, and says why', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ maxResponseBytes: 64 })));
      await lease.complete(valueOutcome('x'.repeat(100), 'json'));
      expect(await storedOutcome(store, key)).toEqual({
        kind: 'unstorable',
        reason: expect.stringMatching(/over maxResponseBytes \(64\)/),
      });
      expect(types(run.events)).toEqual(['claimed', 'response_not_storable', 'completed']);
    });

    it('stores an unstorable outcome with its reason', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy()));
      await lease.complete({ kind: 'unstorable', reason: 'a stream' });
      expect(await storedOutcome(store, key)).toEqual({ kind: 'unstorable', reason: 'a stream' });
      expect(run.events[1]).toMatchObject({ type: 'response_not_storable', reason: 'a stream' });
    });
  });

  describe('fail', () => {
    it('releases the key when cacheErrors does not select the error', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ cacheErrors: () => false })));
      await lease.fail(new Error('boom'), { kind: 'error', error: { name: 'Error', message: 'boom' } });
      expect(await store.get(key)).toBeUndefined();
      expect(types(run.events)).toEqual(['claimed', 'released']);
    });

    it('stores the error for replay when cacheErrors selects it', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ cacheErrors: () => true })));
      const outcome: StoredOutcome = { kind: 'error', error: { name: 'PaymentDeclined', message: 'card declined' } };
      await lease.fail(new Error('card declined'), outcome);
      expect(await storedOutcome(store, key)).toEqual(outcome);
      expect(types(run.events)).toEqual(['claimed', 'error_cached']);
    });

    it('stores a placeholder error when the cached error cannot be serialized', async () => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ cacheErrors: () => true })));
      await lease.fail(new Error('x'), { kind: 'error', error: { name: 'E', message: 'x', props: { amount: 10n } } });
      expect(await storedOutcome(store, key)).toEqual({ kind: 'error', error: { name: 'Error', message: 'error not serializable' } });
    });
  });

  it('release gives the key back, so a retry runs the handler again', async () => {
    const key = newKey();
    const lease = leaseOf(await run.engine.admit({ key }, run.policy()));
    await lease.release();
    expect(await store.get(key)).toBeUndefined();
    const retry = leaseOf(await run.engine.admit({ key }, run.policy()));
    expect(retry.token).not.toBe(lease.token);
    await retry.release();
    expect(types(run.events)).toEqual(['claimed', 'released', 'claimed', 'released']);
  });

  it('abandon keeps the key leased (the outcome is unknown) and writes nothing', async () => {
    const key = newKey();
    const lease = leaseOf(await run.engine.admit({ key }, run.policy()));
    lease.abandon();
    expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: lease.token });
    await expect(run.engine.admit({ key }, run.policy())).rejects.toBeInstanceOf(IdempotencyInFlightError);
    expect(types(run.events)).toEqual(['claimed', 'abandoned', 'in_flight_conflict']);
  });

  describe('settles once', () => {
    it.each<[string, (lease: Lease) => Promise<void> | void]>([
      ['complete', (lease) => lease.complete(valueOutcome('first', 'json'))],
      ['release', (lease) => lease.release()],
      ['abandon', (lease) => lease.abandon()],
    ])('after %s, every later settlement does nothing', async (_first, settle) => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ cacheErrors: () => true })));
      await settle(lease);
      const settled = await store.get(key);
      const eventsAfterFirst = types(run.events);
      await lease.complete(valueOutcome('second', 'json'));
      await lease.fail(new Error('late'), { kind: 'error', error: { name: 'Error', message: 'late' } });
      await lease.release();
      lease.abandon();
      expect(await store.get(key)).toEqual(settled);
      expect(types(run.events)).toEqual(eventsAfterFirst);
    });
  });

  describe('compare-and-set on the lease token', () => {
    /** The key as another worker holds it after this lease ran out: removed, then claimed under its token. */
    async function takeOver(key: string): Promise<void> {
      await store.delete(key);
      expect(await store.claim(key, { token: 'other-worker', leaseTtl: 30_000 })).toMatchObject({ claimed: true });
    }

    it.each<[string, (lease: Lease) => Promise<void>]>([
      ['complete', (lease) => lease.complete(valueOutcome('late', 'json'))],
      ['release', (lease) => lease.release()],
      ['a cached failure', (lease) => lease.fail(new Error('late'), { kind: 'error', error: { name: 'Error', message: 'late' } })],
    ])('%s of a lease taken over changes nothing of the other worker’s lease and reports lease_lost', async (_write, settle) => {
      const key = newKey();
      const lease = leaseOf(await run.engine.admit({ key }, run.policy({ cacheErrors: () => true })));
      await takeOver(key);
      await settle(lease);
      expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: 'other-worker' });
      expect(lease.isLost).toBe(true);
      expect(types(run.events)).toEqual(['claimed', 'lease_lost']);
    });
  });
});

describe('Lease renewals (memory store, fake clock)', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('renews every third of leaseTtl while the handler runs, so the key stays claimed past its lease', async () => {
    const store = new MemoryIdempotencyStore();
    const run = setup(store);
    const key = newKey();
    const lease = leaseOf(await run.engine.admit({ key }, run.policy({ leaseTtl: 300 })));
    await jest.advanceTimersByTimeAsync(1_000);
    const record = await store.get(key);
    expect(record).toMatchObject({ status: 'in_progress', leaseToken: lease.token });
    expect(record?.status === 'in_progress' && record.leaseExpiresAt).toBeGreaterThan(Date.now());
    await expect(setup(store).engine.admit({ key }, run.policy({ leaseTtl: 300 }))).rejects.toBeInstanceOf(IdempotencyInFlightError);
    await lease.complete(valueOutcome(1, 'json'));
    // Settled: its renewal left the queue, and the queue's timer is gone with it.
    expect(jest.getTimerCount()).toBe(0);
  });

  it('a renewal that finds the key taken over reports lease_lost once and stops renewing', async () => {
    const store = new MemoryIdempotencyStore();
    const run = setup(store);
    const key = newKey();
    const lease = leaseOf(await run.engine.admit({ key }, run.policy({ leaseTtl: 300 })));
    await store.delete(key);
    await store.claim(key, { token: 'other-worker', leaseTtl: 60_000 });
    await jest.advanceTimersByTimeAsync(100);
    expect(lease.isLost).toBe(true);
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(types(run.events)).toEqual(['claimed', 'lease_lost']);
    expect(await store.get(key)).toMatchObject({ leaseToken: 'other-worker' });
  });

  it('leases of one engine with the same leaseTtl share one timer', async () => {
    const run = setup(new MemoryIdempotencyStore());
    const leases = [];
    for (let i = 0; i < 5; i++) leases.push(leaseOf(await run.engine.admit({ key: newKey() }, run.policy({ leaseTtl: 300 }))));
    expect(jest.getTimerCount()).toBe(1);
    for (const lease of leases) lease.abandon();
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe('Lease renewals on Redis (its own clock: real time)', () => {
  it('keeps the key claimed past its lease while the handler runs', async () => {
    const store = new RedisIdempotencyStore(redis, { prefix: `test:lease-spec:${randomUUID()}:` });
    const run = setup(store);
    const key = newKey();
    const lease = leaseOf(await run.engine.admit({ key }, run.policy({ leaseTtl: 150 })));
    // Any wait longer than the lease shows it: without renewals the key would be free again.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: lease.token });
    await lease.complete(valueOutcome(1, 'json'));
    expect(types(run.events)).toEqual(['claimed', 'completed']);
  });
});
