import { IdempotencyLeaseLostError, MemoryIdempotencyStore, makeIdempotent, step, type IdempotencyEvent } from '../../lib/index.js';
import { IdempotencyEngine } from '../../lib/core/engine.js';
import { resolvePolicy } from '../../lib/core/policy.js';

/** step() (issue 27) under what its own suite does not try. */
describe('step(): hostile cases', () => {
  it('a zombie whose lease ran out (a pause longer than the lease) does not run its next step, even before it hears of the takeover', async () => {
    const store = new MemoryIdempotencyStore();
    const engine = new IdempotencyEngine();
    const events: IdempotencyEvent[] = [];
    const policy = {
      ...resolvePolicy('zombie-next', { leaseTtl: 60, ttl: 60_000 }, { store }),
      onEvent: (e: IdempotencyEvent) => events.push(e),
    };
    const request = { key: 'k-zombie-next', fingerprint: 'f' };
    const charge = jest.fn(() => 'charged');
    const outcome = engine.execute(request, policy, async () => {
      await step('one', () => 1);
      // A pause longer than the lease between two steps (a GC, a blocked loop, SIGSTOP)...
      const until = Date.now() + 150;
      while (Date.now() < until);
      // ...during which another worker took the key over and is charging itself.
      expect((await store.claim(request.key, { token: 'new-owner', leaseTtl: 60_000, fingerprint: 'f' })).claimed).toBe(true);
      // No renewal has run yet, so nothing told this worker: its own clock says the lease is gone.
      return step('charge', charge);
    });
    await expect(outcome).rejects.toBeInstanceOf(IdempotencyLeaseLostError);
    expect(charge).not.toHaveBeenCalled();
  });

  class Money {
    constructor(
      readonly cents: number,
      readonly currency: string,
    ) {}
  }

  it.each<[string, () => unknown]>([
    ['undefined', () => undefined],
    ['null', () => null],
    ['a Date', () => new Date(Date.UTC(2026, 1, 2))],
    ['a Map', () => new Map<string, unknown>([['a', 1n]])],
    ['a bigint', () => 2n ** 70n],
    ['a Buffer', () => Buffer.from([0, 255])],
    ['an object with an undefined field', () => ({ a: 1, b: undefined })],
    ['a NaN', () => NaN],
    ['a sparse array', () => [1, , 3]], // eslint-disable-line no-sparse-arrays
    ['a negative zero', () => -0],
  ])('%s: what step() resolves with on the first attempt equals what a retry gets', async (_what, make) => {
    const store = new MemoryIdempotencyStore();
    const seen: unknown[] = [];
    let fail = true;
    const fn = makeIdempotent(
      async function values(_id: string) {
        seen.push(await step('value', make));
        if (fail) {
          fail = false;
          throw new Error('after the step');
        }
        return 'ok';
      },
      { store, key: (id: string) => id },
    );
    await expect(fn('v')).rejects.toThrow('after the step');
    await fn('v');
    expect(seen).toHaveLength(2);
    expect(seen[1]).toStrictEqual(seen[0]);
  });

  it('a class instance result is either refused on the first attempt or comes back the same on a retry', async () => {
    const store = new MemoryIdempotencyStore();
    const seen: unknown[] = [];
    let fail = true;
    const fn = makeIdempotent(
      async function money(_id: string) {
        seen.push(await step('money', () => new Money(700, 'EUR')).catch((error: Error) => error.constructor.name));
        if (fail) {
          fail = false;
          throw new Error('after the step');
        }
        return 'ok';
      },
      { store, key: (id: string) => id },
    );
    await expect(fn('m')).rejects.toThrow('after the step');
    await fn('m');
    expect(seen[1]).toStrictEqual(seen[0]);
  });
});
