import {
  IdempotencyConfigurationError,
  IdempotencyLeaseLostError,
  MemoryIdempotencyStore,
  makeIdempotent,
  step,
  stepKey,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { IdempotencyEngine } from '../../lib/core/engine.js';
import { resolvePolicy } from '../../lib/core/policy.js';

/** The semantics of step() and stepKey() (issue 27), on the memory store, through makeIdempotent and the engine. */
describe('step() and stepKey()', () => {
  let store: MemoryIdempotencyStore;
  let effects: string[];
  let events: IdempotencyEvent[];

  beforeEach(() => {
    store = new MemoryIdempotencyStore();
    effects = [];
    events = [];
  });

  /** A refund in three steps; `failAt` makes the named step throw once (the handler then fails and the key is released). */
  function refund(failAt?: { step: string; times: number }) {
    const failing = { ...failAt };
    return makeIdempotent(
      async function refund(_id: string, amount: number) {
        const charge = await step('charge', (key) => {
          effects.push(`charge:${key}`);
          return { id: `ch_${effects.length}`, amount, at: new Date(Date.UTC(2026, 0, 1)) };
        });
        await step('ledger', () => {
          if (failing.step === 'ledger' && failing.times!-- > 0) throw new Error('ledger down');
          effects.push(`ledger:${charge.id}`);
          return undefined;
        });
        await step('email', () => {
          effects.push('email');
          return new Map([['sent', true]]);
        });
        return { chargeId: charge.id, at: charge.at };
      },
      { store, key: (id) => id, fingerprint: true, onEvent: (event) => events.push(event) },
    );
  }

  it('a retry after a failure resumes after the finished steps, with their recorded results', async () => {
    const fn = refund({ step: 'ledger', times: 1 });
    await expect(fn('r1', 10)).rejects.toThrow('ledger down');
    expect(effects).toEqual([expect.stringMatching(/^charge:step_/)]);
    const answer = await fn('r1', 10);
    expect(effects.filter((e) => e.startsWith('charge'))).toHaveLength(1);
    expect(effects.slice(1)).toEqual(['ledger:ch_1', 'email']);
    expect(answer).toEqual({ chargeId: 'ch_1', at: new Date(Date.UTC(2026, 0, 1)) });
    expect(events.filter((e) => e.type === 'step_replayed').map((e) => e.step)).toEqual(['charge']);
    expect(events.filter((e) => e.type === 'step_completed').map((e) => e.step)).toEqual(['charge', 'ledger', 'email']);
    // A later call replays the stored answer: no step runs, none is replayed.
    await fn('r1', 10);
    expect(effects).toHaveLength(3);
  });

  it('another fingerprint under a released key never receives the steps of the first request', async () => {
    const fn = refund({ step: 'ledger', times: 1 });
    await expect(fn('r2', 10)).rejects.toThrow('ledger down');
    await fn('r2', 99);
    expect(effects.filter((e) => e.startsWith('charge'))).toHaveLength(2);
    const keys = effects.filter((e) => e.startsWith('charge'));
    expect(keys[0]).not.toEqual(keys[1]);
  });

  it('stepKey is stable across attempts, printable, at most 255 characters, without the client key, distinct per step and key', async () => {
    const seen: string[] = [];
    let fail = true;
    const fn = makeIdempotent(
      async function keys(_id: string) {
        seen.push(stepKey('a'), stepKey('b'));
        await step('a', (key) => {
          expect(key).toBe(stepKey('a'));
        });
        if (fail) {
          fail = false;
          throw new Error('once');
        }
        return 'ok';
      },
      { store, key: (id) => `client-secret-${id}` },
    );
    await expect(fn('x')).rejects.toThrow('once');
    await fn('x');
    await fn('y');
    expect(seen[0]).toBe(seen[2]);
    expect(seen[1]).toBe(seen[3]);
    expect(new Set([seen[0], seen[1], seen[4], seen[5]]).size).toBe(4);
    for (const key of seen) {
      expect(key).toMatch(/^[\x21-\x7e]{1,255}$/);
      expect(key).not.toContain('client-secret');
    }
  });

  it('outside an idempotent execution, step() and stepKey() throw a configuration error with a hint; run never runs', async () => {
    const run = jest.fn();
    await expect(step('charge', run)).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(step('charge', run)).rejects.toMatchObject({ hint: expect.stringContaining('@Idempotent()') });
    expect(() => stepKey('charge')).toThrow(IdempotencyConfigurationError);
    expect(run).not.toHaveBeenCalled();
  });

  it('after an execution ended, its leftovers in the context do not count as one', async () => {
    const fn = makeIdempotent(async function noop(_id: string) {}, { store, key: (id) => id });
    await fn('a');
    await expect(step('late', () => 1)).rejects.toBeInstanceOf(IdempotencyConfigurationError);
  });

  it('the same step name twice in one execution is refused; a failed step may be tried again under its name', async () => {
    let tries = 0;
    const fn = makeIdempotent(
      async function twice(_id: string) {
        await expect(
          step('flaky', () => {
            tries++;
            throw new Error('flaky');
          }),
        ).rejects.toThrow('flaky');
        await step('flaky', () => tries++);
        await step('once', () => 1);
        await step('once', () => 2);
      },
      { store, key: (id) => id },
    );
    await expect(fn('t')).rejects.toThrow(/step\('once'\) was called twice in one execution/);
    expect(tries).toBe(2);
  });

  it('a result that cannot be stored fails the step before the next one runs', async () => {
    const next = jest.fn();
    const tooBig = makeIdempotent(
      async function tooBig(_id: string) {
        await step('big', () => 'x'.repeat(2_000));
        await step('next', next);
      },
      { store, key: (id) => id, maxResponseBytes: 1_000 },
    );
    await expect(tooBig('b')).rejects.toThrow(
      /step\('big'\) ran, but its result cannot be recorded: the result is \d+ bytes, over maxResponseBytes/,
    );
    const stream = makeIdempotent(
      async function stream(_id: string) {
        await step('stream', () => ({ pipe() {} }));
        await step('next', next);
      },
      { store, key: (id) => id },
    );
    await expect(stream('s')).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    const fn = makeIdempotent(
      async function fn(_id: string) {
        await step('fn', () => () => 1);
        await step('next', next);
      },
      { store, key: (id) => id },
    );
    await expect(fn('f')).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    expect(next).not.toHaveBeenCalled();
  });

  it('a handler that never calls step() makes no step call on the store', async () => {
    const calls: string[] = [];
    const spy = new Proxy(store, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          calls.push(String(property));
          return (value as Function).apply(target, args);
        };
      },
    }) as IdempotencyStore;
    const fn = makeIdempotent(
      async function plain(id: string) {
        return id;
      },
      { store: spy, key: (id) => id },
    );
    await fn('p');
    await fn('p');
    expect(calls).toEqual(['claim', 'complete', 'claim']);
  });

  it('a store without step records is refused by step() with a configuration error naming it', async () => {
    class OldStore extends MemoryIdempotencyStore {}
    const old = new OldStore() as IdempotencyStore;
    Object.defineProperty(old, 'loadSteps', { value: undefined });
    const run = jest.fn();
    const fn = makeIdempotent(
      async function old(_id: string) {
        await step('a', run);
      },
      { store: old, key: (id) => id },
    );
    await expect(fn('o')).rejects.toThrow(/OldStore has no loadSteps\/saveStep/);
    expect(run).not.toHaveBeenCalled();
  });

  it('fencing: a worker whose lease was taken over cannot record a step nor overwrite the new owner, and its next step() fails before running', async () => {
    const engine = new IdempotencyEngine();
    const policy = {
      // A lease long enough that a loaded machine still records step 'one' under it (60 ms
      // did not, beside other work), short enough that the pause below outlasts it.
      ...resolvePolicy('zombie', { leaseTtl: 300, ttl: 60_000 }, { store }),
      onEvent: (event: IdempotencyEvent) => events.push(event),
    };
    const request = { key: 'k-zombie', fingerprint: 'f' };
    const three = jest.fn();
    const outcome = engine.execute(request, policy, async () => {
      await step('one', () => 1);
      const lost = await step('two', async () => {
        // A pause longer than the lease (a GC, a blocked loop): no renewal runs, the lease runs out...
        const until = Date.now() + 350;
        while (Date.now() < until);
        // ...and another worker claims the key before this one wakes up.
        const takeover = await store.claim(request.key, { token: 'new-owner', leaseTtl: 60_000, fingerprint: 'f' });
        expect(takeover.claimed).toBe(true);
        await store.saveStep(request.key, 'new-owner', { step: 'mine', result: 'new', ttl: 60_000 });
        return 2;
      }).catch((error: unknown) => error);
      expect(lost).toBeInstanceOf(IdempotencyLeaseLostError);
      await waitFor(() => events.some((e) => e.type === 'lease_lost'));
      await step('three', three);
    });
    await expect(outcome).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
    expect(three).not.toHaveBeenCalled();
    const steps = await store.loadSteps(request.key);
    expect(Object.keys(steps)).toHaveLength(2);
    expect(steps.mine).toBe('new');
    expect(await store.get(request.key)).toMatchObject({ status: 'in_progress', leaseToken: 'new-owner' });
  });
});

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
