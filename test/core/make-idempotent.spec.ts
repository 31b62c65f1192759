import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  MemoryIdempotencyStore,
  makeIdempotent,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { IdempotencyEngine } from '../../lib/core/index.js';
import Redis from 'ioredis';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { freePort } from '../support/redis-servers.js';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { IdempotencyEngine as Engine, type ExecutionPolicy } from '../../lib/core/engine.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise the test resolves when it chooses: lets a handler run exactly as long as the test needs. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

async function until(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(10);
  }
}

const cleanups: (() => void)[] = [];
const after = (cleanup: () => void) => cleanups.push(cleanup);
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

describe('makeIdempotent', () => {
  it('runs the function once for 20 concurrent calls with one key, and all get its value', async () => {
    const store = new MemoryIdempotencyStore();
    let runs = 0;
    const charge = makeIdempotent(
      async (order: { id: string; amount: number }) => {
        runs++;
        await sleep(100);
        return { chargeId: `ch_${runs}`, amount: order.amount };
      },
      { store, key: (order) => order.id, scope: 'charge' },
    );
    const results = await Promise.all(Array.from({ length: 20 }, () => charge({ id: 'order-1', amount: 42 })));
    expect(runs).toBe(1);
    for (const r of results) expect(r).toEqual({ chargeId: 'ch_1', amount: 42 });
    // After completion: the stored result, no new run.
    expect(await charge({ id: 'order-1', amount: 42 })).toEqual({ chargeId: 'ch_1', amount: 42 });
    expect(runs).toBe(1);
    // Another key runs again.
    expect(await charge({ id: 'order-2', amount: 1 })).toEqual({ chargeId: 'ch_2', amount: 1 });
  });

  it('runs once across wrappers in other "processes" sharing a store (separate engines)', async () => {
    const store = new MemoryIdempotencyStore();
    let runs = 0;
    const fn = async (id: string) => {
      runs++;
      await sleep(80);
      return `done ${id}`;
    };
    const a = makeIdempotent(fn, { store, key: (id) => id, scope: 'job' });
    const b = makeIdempotent(fn, { store, key: (id) => id, scope: 'job' });
    const results = await Promise.all([a('x'), b('x'), a('x'), b('x')]);
    expect(runs).toBe(1);
    expect(new Set(results)).toEqual(new Set(['done x']));
  });

  it('releases the key on a thrown error, so the next call runs again', async () => {
    const store = new MemoryIdempotencyStore();
    let runs = 0;
    const flaky = makeIdempotent(
      async () => {
        runs++;
        if (runs === 1) throw new Error('transient');
        return runs;
      },
      { store, key: () => 'k', scope: 'flaky' },
    );
    await expect(flaky()).rejects.toThrow('transient');
    expect(await flaky()).toBe(2);
    expect(await flaky()).toBe(2);
    expect(runs).toBe(2);
  });

  it('replays a cached error with its name, message and properties', async () => {
    const store = new MemoryIdempotencyStore();
    let runs = 0;
    class DeclinedError extends Error {
      readonly code = 'card_declined';
    }
    const pay = makeIdempotent(
      async () => {
        runs++;
        const error = new DeclinedError('declined');
        error.name = 'DeclinedError';
        throw error;
      },
      { store, key: () => 'p', scope: 'pay', cacheErrors: (e) => e instanceof DeclinedError },
    );
    await expect(pay()).rejects.toThrow('declined');
    const replayed = await pay().catch((e: unknown) => e as Error & { code?: string });
    expect(replayed).toMatchObject({ name: 'DeclinedError', message: 'declined', code: 'card_declined' });
    expect(runs).toBe(1);
  });

  it('checks the fingerprint when asked', async () => {
    const store = new MemoryIdempotencyStore();
    const f = makeIdempotent(async (id: string, amount: number) => amount, { store, key: (id) => id, scope: 'fp', fingerprint: true });
    expect(await f('a', 1)).toBe(1);
    await expect(f('a', 2)).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
  });

  it('rejects a running duplicate in reject mode', async () => {
    const store = new MemoryIdempotencyStore();
    const running = gate();
    const f = makeIdempotent(async () => running.opened.then(() => 1), { store, key: () => 'r', scope: 'rej', inFlight: 'reject' });
    const first = f();
    // The first holds the key until the gate opens, so the duplicate meets it running.
    await expect(f()).rejects.toBeInstanceOf(IdempotencyInFlightError);
    running.open();
    expect(await first).toBe(1);
  });

  it('gives up waiting after waitTimeout with an in-flight error', async () => {
    const store = new MemoryIdempotencyStore();
    const running = gate();
    const f = makeIdempotent(async () => running.opened.then(() => 1), { store, key: () => 'w', scope: 'wait', waitTimeout: 100 });
    const first = f();
    await expect(f()).rejects.toBeInstanceOf(IdempotencyInFlightError);
    running.open();
    expect(await first).toBe(1);
  });

  it('returns the first caller the real value and duplicates an error when the result cannot be stored', async () => {
    const store = new MemoryIdempotencyStore();
    const big = makeIdempotent(async () => 'x'.repeat(2000), { store, key: () => 'b', scope: 'big', maxResultBytes: 100 });
    expect(await big()).toHaveLength(2000);
    await expect(big()).rejects.toMatchObject({ code: 'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE' });
  });

  it('demands a scope for anonymous functions and a key function', () => {
    const store = new MemoryIdempotencyStore();
    expect(() => makeIdempotent(async () => 1, { store, key: () => 'k' })).toThrow(/scope/);
    expect(() => makeIdempotent(async function named() {}, { store } as never)).toThrow(/key function/);
  });

  it('fails closed with a 503-class error or open, by option', async () => {
    // A real client to a port where no Redis listens: every command fails at once.
    const client = new Redis({ host: '127.0.0.1', port: await freePort(), lazyConnect: true, ...recommendedRedisOptions() });
    client.on('error', () => undefined);
    void client.connect().catch(() => undefined);
    after(() => client.disconnect());
    const broken: IdempotencyStore = new RedisIdempotencyStore(client);
    let runs = 0;
    const closed = makeIdempotent(async () => ++runs, { store: broken, key: () => 'k', scope: 'c' });
    await expect(closed()).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(runs).toBe(0);
    const events: IdempotencyEvent[] = [];
    const open = makeIdempotent(async () => ++runs, {
      store: broken,
      key: () => 'k',
      scope: 'o',
      onStoreError: 'fail-open',
      onEvent: (e) => events.push(e),
    });
    expect(await open()).toBe(1);
    expect(events).toEqual([expect.objectContaining({ type: 'store_error', failOpen: true })]);
  });
});

describe('IdempotencyEngine leases', () => {
  it('reports lease_lost and stores nothing when another worker took the key over', async () => {
    const store = new MemoryIdempotencyStore();
    const events: IdempotencyEvent[] = [];
    const engine = new IdempotencyEngine();
    const policy = {
      store,
      ttl: 10_000,
      leaseTtl: 150,
      inFlight: 'reject' as const,
      waitTimeout: 1000,
      onStoreError: 'fail-closed' as const,
      maxResponseBytes: 1 << 20,
      onEvent: (e: IdempotencyEvent) => events.push(e),
    };
    const admission = await engine.admit({ key: 'lost' }, policy);
    expect(admission.kind).toBe('execute');
    // Simulate a paused owner: stop its renewals by deleting and re-claiming under another token.
    await store.delete('lost');
    await store.claim('lost', { token: 'usurper', leaseTtl: 10_000 });
    if (admission.kind !== 'execute') throw new Error('unreachable');
    const { lease } = admission;
    await until(() => lease.isLost, 'a renewal to find the key taken over');
    await lease.complete({ kind: 'value', value: { t: 'j', v: 1 } });
    expect(events.filter((e) => e.type === 'lease_lost')).toHaveLength(1);
    expect(await store.get('lost')).toMatchObject({ status: 'in_progress', leaseToken: 'usurper' });
  });

  it('reports timings and never the raw key in events', async () => {
    const store = new MemoryIdempotencyStore();
    const events: IdempotencyEvent[] = [];
    const f = makeIdempotent(async () => 1, { store, key: () => 'secret-client-key', scope: 't', onEvent: (e) => events.push(e) });
    await f();
    await f();
    expect(events.map((e) => e.type)).toEqual(['claimed', 'completed', 'replayed']);
    for (const e of events) {
      expect(JSON.stringify(e)).not.toContain('secret-client-key');
      expect(e.durationMs).toBeGreaterThanOrEqual(0);
      expect(e.at).toBeGreaterThan(1_600_000_000_000);
      expect(e.handler).toBe('t');
    }
  });
});

describe('numeric options of makeIdempotent and the engine', () => {
  const store = new MemoryIdempotencyStore();
  const wrap = (options: object) => () => makeIdempotent(async () => 1, { store, key: () => 'k', scope: 'pay', ...options });

  it('refuses what is not a whole number of ms (or bytes) when wrapping, naming the function', () => {
    expect(wrap({ ttl: 1.5 })).toThrow(IdempotencyConfigurationError);
    expect(wrap({ ttl: 1.5 })).toThrow(/makeIdempotent\(pay\): ttl must be a whole number of milliseconds above 0, got 1\.5/);
    expect(wrap({ leaseTtl: 0 })).toThrow(/leaseTtl must be a whole number of milliseconds above 0/);
    expect(wrap({ waitTimeout: -1 })).toThrow(/waitTimeout must be a whole number of milliseconds 0 or more/);
    expect(wrap({ maxResultBytes: '100' })).toThrow(/maxResultBytes must be a whole number above 0, got "100" \(a string\)/);
    expect(wrap({ waitTimeout: 0, ttl: 1, leaseTtl: 1, maxResultBytes: 1 })).not.toThrow();
  });

  it('checks a hand-built policy before touching the store', async () => {
    const engine = new Engine();
    const policy: ExecutionPolicy = {
      store,
      ttl: 60_000,
      leaseTtl: 10_000,
      inFlight: 'reject',
      waitTimeout: Number.NaN,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1 << 20,
    };
    let ran = false;
    const run = engine.execute({ key: 'engine-policy' }, policy, () => (ran = true));
    await expect(run).rejects.toThrow(IdempotencyConfigurationError);
    await expect(engine.execute({ key: 'engine-policy' }, policy, () => 1)).rejects.toThrow(/IdempotencyEngine: waitTimeout must be/);
    expect(ran).toBe(false);
    expect(await store.get('engine-policy')).toBeUndefined();
  });
});
