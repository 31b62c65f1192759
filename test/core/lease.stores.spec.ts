import 'reflect-metadata';
import { AsyncLocalStorage, createHook } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { resolve, sep } from 'node:path';
import { IdempotencyFingerprintMismatchError, IdempotencyInFlightError, type IdempotencyEvent } from '../../lib/index.js';
import { IdempotencyEngine, encodeError, storageKeyOf, type ExecutionPolicy, type Lease } from '../../lib/core/index.js';
import { realStores, type StoreUnderTest } from '../support/real-stores.js';

/**
 * Lease behaviours that no other test guarded (the mutation check of issue 14), on every
 * store: the renew timer is gone once an execution settles, an in-flight duplicate with
 * another request is a mismatch (422) and not a conflict (409), and a lease abandoned by
 * a cancelled request is never settled a second time.
 */

// idleTimeoutMillis 0: the pool arms no idle timer per released connection, so every
// timer left after an execution is the engine's.
const stores = realStores('lease', { pgExtra: { idleTimeoutMillis: 0 } });

/**
 * Every `Timeout` (setTimeout and setInterval alike) created inside `within(work)`, in
 * its own async context, until it fires or is cleared: Node reports both as the
 * resource's destroy. A timer armed elsewhere (a settling write of an earlier test file
 * in this worker still retrying against its closed store, 50 ms doubling to 1 s, or
 * Jest's own) is not this execution's: counting every timer process-wide failed this
 * test in CI once, with timers of 1000, 1000 and 100 ms.
 */
function trackTimers() {
  const live = new Map<number, string>();
  const context = new AsyncLocalStorage<true>();
  const hook = createHook({
    init(asyncId, type, _trigger, resource) {
      if (type !== 'Timeout' || context.getStore() !== true) return;
      const timer = resource as { _idleTimeout?: number; _repeat?: number | null };
      live.set(asyncId, `${timer._repeat ? 'interval' : 'timeout'} of ${timer._idleTimeout} ms (${armedAt()})`);
    },
    destroy(asyncId) {
      live.delete(asyncId);
    },
  });
  hook.enable();
  return {
    within<T>(work: () => Promise<T>): Promise<T> {
      return context.run(true, work);
    },
    /** Resolves once no tracked timer is left; a store's own timers (command timeouts) go with their replies. */
    async noneLeft(timeoutMs = 3_000): Promise<void> {
      const deadline = Date.now() + timeoutMs;
      try {
        while (live.size > 0) {
          if (Date.now() > deadline) throw new Error(`timers left after the execution settled: ${[...live.values()].join(', ')}`);
          await new Promise<void>((resolve) => setTimeout(resolve, 10));
        }
      } finally {
        hook.disable();
      }
    },
  };
}

/** The first frame in lib/ of the code arming a timer, to name it in the failure. */
function armedAt(): string {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 50;
  const stack = new Error().stack ?? '';
  Error.stackTraceLimit = limit;
  const libDir = resolve(__dirname, '../../lib') + sep;
  return (
    stack
      .split('\n')
      .find((line) => line.includes(libDir))
      ?.trim() ?? 'not from lib/'
  );
}

class CachedError extends Error {}

describe.each(stores)('Lease on the %s store', (_name, makeStore) => {
  let subject: StoreUnderTest;
  const engine = new IdempotencyEngine();

  beforeAll(async () => {
    subject = await makeStore();
  }, 30_000);
  afterAll(async () => {
    await subject?.dispose();
  });

  function policy(events: IdempotencyEvent[] = []): ExecutionPolicy {
    return {
      store: subject.store,
      ttl: 60_000,
      leaseTtl: 30_000,
      inFlight: 'reject',
      waitTimeout: 0,
      onStoreError: 'fail-closed',
      cacheErrors: (error) => error instanceof CachedError,
      maxResponseBytes: 1 << 20,
      onEvent: (event) => events.push(event),
    };
  }

  async function claim(key: string, events?: IdempotencyEvent[], fingerprint?: string): Promise<Lease> {
    const admission = await engine.admit({ key, fingerprint }, policy(events));
    if (admission.kind !== 'execute') throw new Error(`expected to claim ${key}, got ${admission.kind}`);
    return admission.lease;
  }

  const settlements: [string, (lease: Lease) => Promise<void> | void][] = [
    ['complete', (lease) => lease.complete({ kind: 'value', value: { t: 'j', v: 1 } })],
    ['fail (release)', (lease) => lease.fail(new Error('boom'), { kind: 'error', error: encodeError(new Error('boom')) })],
    ['fail (cached error)', (lease) => lease.fail(new CachedError('no'), { kind: 'error', error: encodeError(new CachedError('no')) })],
    ['abandon', (lease) => lease.abandon()],
  ];

  it.each(settlements)('leaves no renew timer (or any other) behind once the execution settles by %s', async (_how, settle) => {
    const timers = trackTimers();
    await timers.within(async () => {
      const lease = await claim(storageKeyOf('lease-timer', randomUUID()));
      await settle(lease);
    });
    await timers.noneLeft();
  });

  it('refuses an in-flight duplicate with another fingerprint with a mismatch (422), not an in-flight conflict (409)', async () => {
    const key = storageKeyOf('lease-mismatch', randomUUID());
    const events: IdempotencyEvent[] = [];
    const lease = await claim(key, events, 'fingerprint-a');
    try {
      const other = await engine.admit({ key, fingerprint: 'fingerprint-b' }, policy(events)).catch((error: unknown) => error);
      expect(other).toBeInstanceOf(IdempotencyFingerprintMismatchError);
      expect(other).toMatchObject({ status: 422 });
      // The same request at the same moment is the in-flight case, so the record was running.
      const same = await engine.admit({ key, fingerprint: 'fingerprint-a' }, policy(events)).catch((error: unknown) => error);
      expect(same).toBeInstanceOf(IdempotencyInFlightError);
      expect(events.map((e) => e.type)).toEqual(['claimed', 'fingerprint_mismatch', 'in_flight_conflict']);
    } finally {
      await lease.release();
    }
  });

  it('never settles a lease a second time once a cancelled request abandoned it', async () => {
    const key = storageKeyOf('lease-abandon', randomUUID());
    const events: IdempotencyEvent[] = [];
    const lease = await claim(key, events);
    lease.abandon();
    await lease.complete({ kind: 'value', value: { t: 'j', v: 'late' } });
    await lease.fail(new CachedError('late'), { kind: 'error', error: encodeError(new CachedError('late')) });
    await lease.fail(new Error('late'), { kind: 'error', error: encodeError(new Error('late')) });
    await lease.release();
    lease.abandon();
    expect(await subject.store.get(key)).toMatchObject({ status: 'in_progress', leaseToken: lease.token });
    expect(events.map((e) => e.type)).toEqual(['claimed', 'abandoned']);
    await subject.store.delete(key);
  });
});
