import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyNotReplayableError,
  IdempotencyStoreUnavailableError,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { IdempotencyEngine, replayValue, type Admission, type ExecutionPolicy } from '../../lib/core/engine.js';
import type { Lease } from '../../lib/core/lease.js';
import { valueOutcome } from '../../lib/core/outcome.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { freePort } from '../support/redis-servers.js';

/**
 * The protocol's decisions (lib/core/engine.ts), on the real memory store: a claim runs
 * the handler, a completed record replays, a running duplicate is refused or waits, a
 * fingerprint that differs is refused, a lease taken over is reported, and a store
 * outage fails closed or open. Store outages use a Redis client to a port where nothing
 * listens: a real store that fails, not a mock of one.
 */

interface Run {
  readonly engine: IdempotencyEngine;
  readonly store: IdempotencyStore;
  readonly events: IdempotencyEvent[];
  policy(overrides?: Partial<ExecutionPolicy>): ExecutionPolicy;
}

function setup(store: IdempotencyStore = new MemoryIdempotencyStore()): Run {
  const events: IdempotencyEvent[] = [];
  return {
    engine: new IdempotencyEngine(),
    store,
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
      handler: 'engine.spec',
      ...overrides,
    }),
  };
}

const newKey = () => `engine-spec:${randomUUID()}`;
const types = (events: IdempotencyEvent[]) => events.map((event) => event.type);

function leaseOf(admission: Admission): Lease {
  if (admission.kind !== 'execute') throw new Error(`expected an execution, got ${admission.kind}`);
  return admission.lease;
}

describe('IdempotencyEngine: the protocol', () => {
  describe('claim -> execute', () => {
    it('claims an absent key under a fresh lease token and tells the caller to run the handler', async () => {
      const { engine, store, events, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key, fingerprint: 'fp' }, policy()));
      expect(lease.key).toBe(key);
      expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: lease.token, fingerprint: 'fp' });
      expect(types(events)).toEqual(['claimed']);
      expect(events[0]).toMatchObject({ key, handler: 'engine.spec', storeLatencyMs: expect.any(Number) });
      lease.abandon();
    });

    it('gives every claim its own token', async () => {
      const { engine, policy } = setup();
      const first = leaseOf(await engine.admit({ key: newKey() }, policy()));
      const second = leaseOf(await engine.admit({ key: newKey() }, policy()));
      expect(first.token).not.toBe(second.token);
      first.abandon();
      second.abandon();
    });

    it('execute() runs the function once and stores its value', async () => {
      const { engine, store, events, policy } = setup();
      const key = newKey();
      let runs = 0;
      const result = await engine.execute({ key }, policy(), () => ({ runs: ++runs }));
      expect(result).toEqual({ value: { runs: 1 }, replayed: false });
      expect(await store.get(key)).toMatchObject({ status: 'completed' });
      expect(types(events)).toEqual(['claimed', 'completed']);
    });
  });

  describe('completed -> replay', () => {
    it('replays the stored outcome without running the handler', async () => {
      const { engine, events, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key, fingerprint: 'fp' }, policy()));
      await lease.complete(valueOutcome({ id: 7 }, 'json'));
      const admission = await engine.admit({ key, fingerprint: 'fp' }, policy());
      expect(admission).toEqual({ kind: 'replay', outcome: valueOutcome({ id: 7 }, 'json') });
      expect(types(events)).toEqual(['claimed', 'completed', 'replayed']);
    });

    it('execute() replays a faithful copy of the value (a Date stays a Date) and marks it replayed', async () => {
      const { engine, policy } = setup();
      const key = newKey();
      const at = new Date('2026-01-02T03:04:05.000Z');
      let runs = 0;
      await engine.execute({ key }, policy(), () => ({ at, runs: ++runs }));
      const replay = await engine.execute({ key }, policy(), () => ({ at, runs: ++runs }));
      expect(replay.replayed).toBe(true);
      expect(replay.value).toEqual({ at, runs: 1 });
      expect((replay.value as { at: Date }).at).toBeInstanceOf(Date);
    });

    it('execute() releases the key when the function throws, so the next call runs it again', async () => {
      const { engine, store, events, policy } = setup();
      const key = newKey();
      await expect(engine.execute({ key }, policy(), () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
      expect(await store.get(key)).toBeUndefined();
      expect(await engine.execute({ key }, policy(), () => 'second')).toEqual({ value: 'second', replayed: false });
      expect(types(events)).toEqual(['claimed', 'released', 'claimed', 'completed']);
    });

    it('execute() rethrows a cached error on the replay when cacheErrors selects it', async () => {
      const { engine, policy } = setup();
      const key = newKey();
      const cached = policy({ cacheErrors: (error) => (error as Error).message === 'declined' });
      await expect(engine.execute({ key }, cached, () => Promise.reject(new TypeError('declined')))).rejects.toThrow('declined');
      const replay = await engine.execute({ key }, cached, () => 'never').catch((error: unknown) => error);
      expect(replay).toMatchObject({ name: 'TypeError', message: 'declined' });
    });

    it('replayValue() refuses an outcome stored as not replayable', () => {
      expect(() => replayValue({ kind: 'unstorable', reason: 'too big' })).toThrow(IdempotencyNotReplayableError);
      expect(replayValue(valueOutcome(5, 'json'))).toBe(5);
    });
  });

  describe('in flight', () => {
    it("'reject' refuses a duplicate while the first runs (409, retry after 1 s) and reports the conflict once", async () => {
      const { engine, events, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key }, policy()));
      const refusal = await engine.admit({ key }, policy()).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(IdempotencyInFlightError);
      expect((refusal as IdempotencyInFlightError).retryAfterMs).toBe(1_000);
      expect(types(events)).toEqual(['claimed', 'in_flight_conflict']);
      lease.abandon();
    });

    it("'wait' answers the duplicate with the first one's outcome as soon as it completes", async () => {
      const { engine, events, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key }, policy()));
      const waiting = engine.admit({ key }, policy({ inFlight: 'wait', waitTimeout: 10_000 }));
      await lease.complete(valueOutcome('done', 'json'));
      expect(await waiting).toEqual({ kind: 'replay', outcome: valueOutcome('done', 'json') });
      expect(types(events)).toEqual(['claimed', 'in_flight_conflict', 'completed', 'replayed']);
    });

    it("'wait' claims the key itself when the first one releases it", async () => {
      const { engine, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key }, policy()));
      const waiting = engine.admit({ key }, policy({ inFlight: 'wait', waitTimeout: 10_000 }));
      await lease.release();
      const second = leaseOf(await waiting);
      expect(second.token).not.toBe(lease.token);
      second.abandon();
    });

    it("'wait' gives up with the in-flight refusal after waitTimeout", async () => {
      const { engine, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key }, policy()));
      const startedAt = Date.now();
      await expect(engine.admit({ key }, policy({ inFlight: 'wait', waitTimeout: 60 }))).rejects.toBeInstanceOf(IdempotencyInFlightError);
      expect(Date.now() - startedAt).toBeGreaterThanOrEqual(55);
      lease.abandon();
    });
  });

  describe('fingerprints', () => {
    it('refuses the same key with another fingerprint (422), whether the first is done or still running', async () => {
      const { engine, events, policy } = setup();
      const running = newKey();
      const lease = leaseOf(await engine.admit({ key: running, fingerprint: 'a' }, policy()));
      await expect(engine.admit({ key: running, fingerprint: 'b' }, policy())).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
      await lease.complete(valueOutcome(1, 'json'));
      await expect(engine.admit({ key: running, fingerprint: 'b' }, policy())).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
      expect(types(events)).toEqual(['claimed', 'fingerprint_mismatch', 'completed', 'fingerprint_mismatch']);
    });

    it('compares nothing when either side has no fingerprint', async () => {
      const { engine, policy } = setup();
      const key = newKey();
      await engine.execute({ key, fingerprint: 'a' }, policy(), () => 1);
      expect((await engine.admit({ key }, policy())).kind).toBe('replay');
      const other = newKey();
      await engine.execute({ key: other }, policy(), () => 1);
      expect((await engine.admit({ key: other, fingerprint: 'b' }, policy())).kind).toBe('replay');
    });
  });

  describe('lease lost', () => {
    it('reports lease_lost when another worker took the key over, and leaves that worker’s record alone', async () => {
      const { engine, store, events, policy } = setup();
      const key = newKey();
      const lease = leaseOf(await engine.admit({ key }, policy()));
      // Another worker took the key over after this lease ran out (here: removed and claimed again).
      await store.delete(key);
      await store.claim(key, { token: 'other-worker', leaseTtl: 30_000 });
      await lease.complete(valueOutcome('late', 'json'));
      expect(lease.isLost).toBe(true);
      expect(types(events)).toEqual(['claimed', 'lease_lost']);
      expect(await store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: 'other-worker' });
    });

    it('lets another engine claim a key whose lease expired', async () => {
      const store = new MemoryIdempotencyStore();
      const first = setup(store);
      const second = setup(store);
      const key = newKey();
      // A lease already expired in the store: a worker that crashed, without renewals.
      await store.claim(key, { token: 'crashed', leaseTtl: 1 });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const lease = leaseOf(await second.engine.admit({ key }, second.policy()));
      expect(await store.get(key)).toMatchObject({ leaseToken: lease.token });
      lease.abandon();
      expect(first.events).toEqual([]);
    });
  });

  describe('store errors', () => {
    let client: Redis;
    let broken: RedisIdempotencyStore;
    beforeAll(async () => {
      // A real client to a port where no Redis listens: every command fails at once.
      client = new Redis({ host: '127.0.0.1', port: await freePort(), lazyConnect: true, ...recommendedRedisOptions() });
      client.on('error', () => undefined);
      void client.connect().catch(() => undefined);
      broken = new RedisIdempotencyStore(client);
    });
    afterAll(() => client.disconnect());

    it("'fail-closed' refuses with a store-unavailable error (503) and reports it", async () => {
      const { engine, events, policy } = setup(broken);
      let runs = 0;
      await expect(engine.execute({ key: newKey() }, policy(), () => ++runs)).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(runs).toBe(0);
      expect(events).toEqual([expect.objectContaining({ type: 'store_error', failOpen: false })]);
    });

    it("'fail-open' runs the handler unprotected and reports it", async () => {
      const { engine, events, policy } = setup(broken);
      expect(await engine.admit({ key: newKey() }, policy({ onStoreError: 'fail-open' }))).toEqual({ kind: 'unprotected' });
      expect(await engine.execute({ key: newKey() }, policy({ onStoreError: 'fail-open' }), () => 'ran')).toEqual({
        value: 'ran',
        replayed: false,
      });
      expect(types(events)).toEqual(['store_error', 'store_error']);
      expect(events[0]).toMatchObject({ failOpen: true, error: expect.any(Error) });
    });

    it("'fail-open' calls then() once on what the function returns (a lazy query runs on each call)", async () => {
      const { engine, policy } = setup(broken);
      let runs = 0;
      // As a query builder that runs when awaited (Knex, Drizzle's QueryPromise), typed as a Promise.
      const lazyQuery: PromiseLike<string> = {
        then(onFulfilled, onRejected) {
          runs++;
          return Promise.resolve(`inserted ${runs}`).then(onFulfilled, onRejected);
        },
      };
      expect(await engine.execute({ key: newKey() }, policy({ onStoreError: 'fail-open' }), () => lazyQuery as Promise<string>)).toEqual({
        value: 'inserted 1',
        replayed: false,
      });
      expect(runs).toBe(1);
    });
  });

  it('checks the policy it is given before touching the store', async () => {
    const { engine, store, policy } = setup();
    const key = newKey();
    await expect(engine.admit({ key }, policy({ ttl: 1.5 }))).rejects.toThrow(/IdempotencyEngine: ttl must be a whole number/);
    expect(await store.get(key)).toBeUndefined();
  });

  it('never lets a throwing listener change the outcome', async () => {
    const { engine, policy } = setup();
    const faulty = policy({
      onEvent: () => {
        throw new Error('listener bug');
      },
    });
    const key = newKey();
    expect(await engine.execute({ key }, faulty, () => 1)).toEqual({ value: 1, replayed: false });
    expect(await engine.execute({ key }, faulty, () => 2)).toEqual({ value: 1, replayed: true });
  });
});
