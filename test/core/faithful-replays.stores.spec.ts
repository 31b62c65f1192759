import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { IdempotencyNotReplayableError, makeIdempotent, type IdempotencyEvent } from '../../lib/index.js';
import { TypeOrmIdempotencyStore, executeIdempotentTransaction } from '../../lib/typeorm/index.js';
import { pgSchema, realStores, type StoreUnderTest } from '../support/real-stores.js';

/**
 * A replay of makeIdempotent and of an idempotent transaction is a faithful copy of the
 * first value after the trip through each store's string (Redis, PostgreSQL, memory),
 * and what cannot be copied is reported on the first call, never replayed as something else.
 */

/** A value of everything JSON cannot carry, nested. */
function richValue() {
  const customer = { id: 'cus_1' };
  return {
    at: new Date(1_764_625_404_123),
    amount: 12345678901234567890n,
    lines: new Map<string, unknown>([
      ['sku_1', { qty: 2, since: new Date(0) }],
      ['sku_2', { qty: -0, ratio: NaN, cap: Infinity }],
    ]),
    tags: new Set(['a', 'b']),
    receipt: Buffer.from('%PDF-1.7 receipt'),
    samples: new Float32Array([0.5, -1]),
    note: undefined,
    // The same customer twice: one object on replay, as in the first value.
    billedTo: customer,
    shippedTo: customer,
  };
}

function expectRich(value: unknown): void {
  const back = value as ReturnType<typeof richValue>;
  expect(back).toStrictEqual(richValue());
  expect(Buffer.isBuffer(back.receipt)).toBe(true);
  expect('note' in back).toBe(true);
  expect(back.shippedTo).toBe(back.billedTo);
}

const stores = realStores('values');

describe.each(stores)('makeIdempotent replays faithful values (%s)', (_name, open) => {
  let subject: StoreUnderTest;
  beforeAll(async () => {
    subject = await open();
  });
  afterAll(async () => {
    await subject?.dispose();
  });

  it('gives the first caller and every replay Date, Map, Set, bigint, Buffer, typed arrays, undefined, NaN and -0 as they were', async () => {
    let runs = 0;
    const quote = makeIdempotent(
      async (_id: string) => {
        runs++;
        return richValue();
      },
      { store: subject.store, key: (id) => id, scope: `quote-${randomUUID()}` },
    );
    expectRich(await quote('q1'));
    expectRich(await quote('q1'));
    expect(runs).toBe(1);
    // Top-level values too.
    for (const value of [10n, new Date(5), -0, NaN, undefined, new Uint8Array([1, 2])]) {
      const once = makeIdempotent(async () => value, { store: subject.store, key: () => 'k', scope: `top-${randomUUID()}` });
      expect(await once()).toStrictEqual(value);
      expect(await once()).toStrictEqual(value);
    }
  });

  it('reports a value it cannot copy as not storable on the first call, and duplicates get IdempotencyNotReplayableError naming it', async () => {
    const events: IdempotencyEvent[] = [];
    let runs = 0;
    const subscribe = makeIdempotent(
      async () => {
        runs++;
        return { id: 'sub_1', onRenewal: () => 'renewed' };
      },
      { store: subject.store, key: () => 'sub_1', scope: `subscribe-${randomUUID()}`, onEvent: (event) => events.push(event) },
    );
    const first = await subscribe();
    expect(first.id).toBe('sub_1');
    const reported = events.find((event) => event.type === 'response_not_storable');
    expect(reported?.reason).toMatch(/a function at \.onRenewal/);
    const replay = await subscribe().catch((error: unknown) => error);
    expect(replay).toBeInstanceOf(IdempotencyNotReplayableError);
    expect((replay as Error).message).toMatch(/a function at \.onRenewal/);
    expect(runs).toBe(1);
  });
});

describe('executeIdempotentTransaction replays faithful values (PostgreSQL)', () => {
  let pg: { dataSource: DataSource; dispose(): Promise<void> };
  beforeAll(async () => {
    pg = await pgSchema('values_tx');
    await new TypeOrmIdempotencyStore(pg.dataSource).ensureTable();
  });
  afterAll(async () => {
    await pg?.dispose();
  });

  it('commits the record with the work and gives the duplicate the same Date, Map, bigint and Buffer', async () => {
    let runs = 0;
    const work = async () => {
      runs++;
      return richValue();
    };
    const key = randomUUID();
    const first = await executeIdempotentTransaction(pg.dataSource, { key, scope: 'values' }, work);
    const second = await executeIdempotentTransaction(pg.dataSource, { key, scope: 'values' }, work);
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expectRich(second.value);
    expect(runs).toBe(1);
  });

  it('stores a result it cannot copy as not replayable: the duplicate is refused, never handed something else', async () => {
    const key = randomUUID();
    const work = async () => ({ id: 'r1', pending: Promise.resolve(1) });
    const first = await executeIdempotentTransaction(pg.dataSource, { key }, work);
    expect(first.value.id).toBe('r1');
    await expect(executeIdempotentTransaction(pg.dataSource, { key }, work)).rejects.toThrow(/a Promise at \.pending/);
  });
});
