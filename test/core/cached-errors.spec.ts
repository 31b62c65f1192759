import { Redis } from 'ioredis';
import { MemoryIdempotencyStore, makeIdempotent, type IdempotencyStore } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';

/**
 * A cached error comes back as the caller saw it (issue 24): a class `cacheErrors` lists is
 * rebuilt as itself, in any process; one a predicate selected as the nearest built-in
 * class of its chain; always with the stored name, message and fields.
 */
class DeclinedError extends RangeError {
  readonly code = 'CARD_DECLINED';
  constructor(readonly attempt: number) {
    super(`card declined (attempt ${attempt})`);
    this.name = 'DeclinedError';
  }
}

const thrown = async (call: () => Promise<unknown>): Promise<Error> => {
  try {
    await call();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
};

const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
const prefix = `cached-errors-${process.pid}-${Date.now()}:`;
afterAll(async () => {
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length) await redis.del(...keys);
  redis.disconnect();
});

describe.each<[string, () => IdempotencyStore]>([
  ['memory', () => new MemoryIdempotencyStore()],
  ['Redis', () => new RedisIdempotencyStore(redis, { prefix })],
])('cached errors replayed by makeIdempotent (%s)', (_name, storeOf) => {
  it('rethrows an instance of a class cacheErrors lists, from another instance of the application too', async () => {
    const store = storeOf();
    let attempts = 0;
    const decline = async (_order: string): Promise<never> => {
      throw new DeclinedError(++attempts);
    };
    const options = { store, key: (order: string) => order, scope: 'decline', cacheErrors: [DeclinedError] };
    const first = await thrown(() => makeIdempotent(decline, options)('order-1'));
    // A second wrapping stands for another instance: it knows the class only from its options.
    const replay = await thrown(() => makeIdempotent(decline, options)('order-1'));
    expect(attempts).toBe(1);
    expect(first).toBeInstanceOf(DeclinedError);
    expect(replay).toBeInstanceOf(DeclinedError);
    expect(replay).toBeInstanceOf(RangeError);
    expect({ name: replay.name, message: replay.message, code: (replay as DeclinedError).code }).toEqual({
      name: 'DeclinedError',
      message: 'card declined (attempt 1)',
      code: 'CARD_DECLINED',
    });
    expect((replay as DeclinedError).attempt).toBe(1);
  });

  it('rebuilds an error a predicate selected as the nearest built-in class of its chain, with its name and fields', async () => {
    const store = storeOf();
    const decline = async (_order: string): Promise<never> => {
      throw new DeclinedError(1);
    };
    const once = makeIdempotent(decline, {
      store,
      key: (order: string) => order,
      scope: 'decline-by-predicate',
      cacheErrors: (error) => error instanceof DeclinedError,
    });
    await thrown(() => once('order-2'));
    const replay = await thrown(() => once('order-2'));
    expect(replay).toBeInstanceOf(RangeError);
    expect(replay).not.toBeInstanceOf(DeclinedError);
    expect({ name: replay.name, code: (replay as DeclinedError).code }).toEqual({ name: 'DeclinedError', code: 'CARD_DECLINED' });
  });
});

describe('makeIdempotent default scopes', () => {
  // Two modules of one application, each with a function named refund.
  const billing = () =>
    async function refund(order: string) {
      return { module: 'billing', order };
    };
  const shipping = () =>
    async function refund(order: string) {
      return { module: 'shipping', order };
    };

  it('refuses a second, different function of one name on one store, with the fix', () => {
    const store = new MemoryIdempotencyStore();
    makeIdempotent(billing(), { store, key: (order: string) => order });
    expect(() => makeIdempotent(shipping(), { store, key: (order: string) => order })).toThrow(
      expect.objectContaining({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', hint: expect.stringMatching(/scope/) }),
    );
  });

  it("refuses one factory's closures of the same code too: they may do different work", () => {
    const store = new MemoryIdempotencyStore();
    makeIdempotent(billing(), { store, key: (order: string) => order });
    expect(() => makeIdempotent(billing(), { store, key: (order: string) => order })).toThrow(
      expect.objectContaining({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', hint: expect.stringMatching(/wrap a function once/) }),
    );
  });

  it('allows the same function wrapped again, same-named functions with scopes of their own, and other stores', async () => {
    const store = new MemoryIdempotencyStore();
    const refund = billing();
    const first = makeIdempotent(refund, { store, key: (order: string) => order });
    const again = makeIdempotent(refund, { store, key: (order: string) => order });
    expect(await first('o1')).toEqual(await again('o1'));
    const own = makeIdempotent(shipping(), { store, key: (order: string) => order, scope: 'shipping.refund' });
    expect(await own('o1')).toEqual({ module: 'shipping', order: 'o1' });
    const elsewhere = makeIdempotent(shipping(), { store: new MemoryIdempotencyStore(), key: (order: string) => order });
    expect(await elsewhere('o1')).toEqual({ module: 'shipping', order: 'o1' });
  });
});
