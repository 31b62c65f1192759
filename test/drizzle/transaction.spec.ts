import { randomUUID } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { IdempotencyConfigurationError, IdempotencyFingerprintMismatchError, IdempotencyInFlightError } from '../../lib/core/errors.js';
import { storageKeyOf } from '../../lib/core/hash.js';
import { deserializeOutcome } from '../../lib/core/outcome.js';
import {
  executeIdempotentTransaction,
  findIdempotentTransaction,
  getIdempotentTransaction,
  runIdempotentTransaction,
} from '../../lib/drizzle/index.js';
import { mariaLedger, pgLedger, type Ledger } from './refund-tables.js';
import { waitUntil } from './support.js';

const DUPLICATES = 30;

describe.each([
  ['PostgreSQL', pgLedger],
  ['MariaDB', mariaLedger],
] as const)('runIdempotentTransaction on Drizzle (%s)', (_name, makeLedger) => {
  let ledger: Ledger;

  beforeAll(async () => {
    // One connection per concurrent duplicate, plus the one that counts the waiters.
    ledger = await makeLedger(DUPLICATES + 5);
  });
  afterAll(async () => {
    await ledger.destroy();
  });

  /** A refund through `tx`: the refund row, the balance decrement, the new balance. */
  function refund(messageId: string, accountId: number, amount: number, hold?: () => Promise<void>) {
    return async (tx: Ledger['db']) => {
      const { accounts, refunds } = ledger;
      await tx.insert(refunds).values({ messageId, accountId, amount });
      await tx
        .update(accounts)
        .set({ balance: sql`${accounts.balance} - ${amount}` })
        .where(eq(accounts.id, accountId));
      await hold?.();
      const [row] = await tx.select().from(accounts).where(eq(accounts.id, accountId));
      return { refunded: amount, balance: row.balance as number };
    };
  }

  it(`applies ${DUPLICATES} concurrent duplicate refunds once, and every caller gets the result`, async () => {
    const accountId = await ledger.newAccount(1000);
    const messageId = randomUUID();
    let runs = 0;
    // The first transaction stays open until every duplicate waits on the record's row, so
    // they all meet it in flight (not a completed record they could read without waiting).
    const holdUntilDuplicatesWait = () =>
      waitUntil(async () => (await ledger.lockWaiters()) >= DUPLICATES - 1, {
        what: `${DUPLICATES - 1} duplicates waiting on the record`,
        timeoutMs: 20_000,
      });
    const outcomes = await Promise.all(
      Array.from({ length: DUPLICATES }, () =>
        executeIdempotentTransaction(ledger.db, { key: messageId, scope: 'refunds', fingerprint: { accountId, amount: 25 } }, (tx) => {
          runs++;
          return refund(messageId, accountId, 25, holdUntilDuplicatesWait)(tx);
        }),
      ),
    );
    expect(runs).toBe(1);
    expect(outcomes.filter((outcome) => !outcome.replayed)).toHaveLength(1);
    for (const outcome of outcomes) expect(outcome.value).toEqual({ refunded: 25, balance: 975 });
    expect(await ledger.balanceOf(accountId)).toBe(975);
    expect(await ledger.refundsOf(messageId)).toBe(1);
    // The record is the store's ordinary completed record.
    const record = await ledger.store.get(storageKeyOf('refunds', messageId));
    expect(record?.status).toBe('completed');
    expect(deserializeOutcome(record?.status === 'completed' ? record.result : '')).toEqual({
      kind: 'value',
      value: { t: 'j', v: { refunded: 25, balance: 975 } },
    });
  }, 60_000);

  it('leaves no record when the work throws (the writes roll back), so the retry runs cleanly', async () => {
    const accountId = await ledger.newAccount(50);
    const messageId = randomUUID();
    await expect(
      runIdempotentTransaction(ledger.db, { key: messageId }, async (tx) => {
        await refund(messageId, accountId, 20)(tx);
        throw new Error('payment provider down');
      }),
    ).rejects.toThrow('payment provider down');
    expect(await ledger.balanceOf(accountId)).toBe(50);
    expect(await ledger.refundsOf(messageId)).toBe(0);
    expect(await ledger.store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    expect(await runIdempotentTransaction(ledger.db, { key: messageId }, refund(messageId, accountId, 20))).toEqual({
      refunded: 20,
      balance: 30,
    });
  });

  it('refuses the same key with a different fingerprint, the first result kept', async () => {
    const accountId = await ledger.newAccount(100);
    const messageId = randomUUID();
    await runIdempotentTransaction(ledger.db, { key: messageId, fingerprint: { amount: 5 } }, refund(messageId, accountId, 5));
    await expect(
      runIdempotentTransaction(ledger.db, { key: messageId, fingerprint: { amount: 6 } }, refund(messageId, accountId, 6)),
    ).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    expect(await ledger.balanceOf(accountId)).toBe(95);
  });

  it('replays values JSON cannot carry as themselves', async () => {
    const key = randomUUID();
    const value = { at: new Date(1_700_000_000_000), ids: new Set([1, 2]), big: 2n ** 70n };
    expect(await runIdempotentTransaction(ledger.db, { key }, async () => value)).toEqual(value);
    const replay = await executeIdempotentTransaction(ledger.db, { key }, async () => ({
      at: new Date(0),
      ids: new Set<number>(),
      big: 0n,
    }));
    expect(replay).toEqual({ value, replayed: true });
    expect(replay.value.at).toBeInstanceOf(Date);
  });

  it('gives the callback its tx through getIdempotentTransaction() too, and nothing outside', async () => {
    let seen: unknown;
    await runIdempotentTransaction(ledger.db, { key: randomUUID() }, async (tx) => {
      seen = getIdempotentTransaction();
      expect(findIdempotentTransaction()).toBe(tx);
      return seen === tx;
    });
    expect(seen).toBeDefined();
    expect(findIdempotentTransaction()).toBeUndefined();
    expect(() => getIdempotentTransaction()).toThrow(IdempotencyConfigurationError);
  });

  it('joins a nested idempotent transaction to the outer one: both commit or neither', async () => {
    const accountId = await ledger.newAccount(100);
    const outerKey = randomUUID();
    const innerKey = randomUUID();
    await expect(
      runIdempotentTransaction(ledger.db, { key: outerKey }, async (tx) => {
        await runIdempotentTransaction(ledger.db, { key: innerKey }, refund(innerKey, accountId, 10));
        await refund(outerKey, accountId, 1)(tx);
        throw new Error('outer fails after the inner one finished');
      }),
    ).rejects.toThrow('outer fails');
    expect(await ledger.balanceOf(accountId)).toBe(100);
    expect(await ledger.store.get(storageKeyOf('transaction', innerKey))).toBeUndefined();
    await runIdempotentTransaction(ledger.db, { key: outerKey }, async () => {
      await runIdempotentTransaction(ledger.db, { key: innerKey }, refund(innerKey, accountId, 10));
    });
    expect(await ledger.balanceOf(accountId)).toBe(90);
    expect((await ledger.store.get(storageKeyOf('transaction', innerKey)))?.status).toBe('completed');
  });

  it('gives up waiting after waitTimeout with IdempotencyInFlightError, and the first transaction still commits', async () => {
    const key = randomUUID();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    const first = runIdempotentTransaction(ledger.db, { key }, async () => {
      entered();
      await gate;
      return 'first';
    });
    await started;
    await expect(runIdempotentTransaction(ledger.db, { key, waitTimeout: 100 }, async () => 'second')).rejects.toBeInstanceOf(
      IdempotencyInFlightError,
    );
    release();
    expect(await first).toBe('first');
    expect(await runIdempotentTransaction(ledger.db, { key }, async () => 'third')).toBe('first');
  });

  it('refuses a transaction (tx) in place of the database, and a missing table, with the fix', async () => {
    await runIdempotentTransaction(ledger.db, { key: randomUUID() }, async (tx: Ledger['db']) => {
      await expect(runIdempotentTransaction(tx, { key: randomUUID() }, async () => 1)).rejects.toThrow(/instead of the database/);
    });
    const error = await runIdempotentTransaction(ledger.db, { key: randomUUID(), tableName: 'no_such_records' }, async () => 1).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toMatch(/no_such_records.*does not exist.*idempotencyPgTables\('no_such_records'\)/s);
  });
});

describe('an InnoDB deadlock inside the work of a Drizzle idempotent transaction (MariaDB)', () => {
  let ledger: Ledger;

  beforeAll(async () => {
    ledger = await mariaLedger(6);
  });
  afterAll(async () => {
    await ledger.destroy();
  });

  // drizzle wraps the driver's error (errno 1213) in a DrizzleQueryError's `cause`, which
  // lib/sql/failures.ts reads: the transaction InnoDB rolled back runs again.
  it('runs the transaction InnoDB rolled back again, so both transfers go through', async () => {
    const [a, b] = [await ledger.newAccount(100), await ledger.newAccount(100)];
    const { accounts } = ledger;
    const locked = [0, 0];
    let bothLocked!: () => void;
    const meet = new Promise<void>((resolve) => (bothLocked = resolve));
    const transfer = (key: string, first: number, second: number, me: number) =>
      runIdempotentTransaction(ledger.db, { key }, async (tx: Ledger['db']) => {
        await tx
          .update(accounts)
          .set({ balance: sql`${accounts.balance} - 1` })
          .where(eq(accounts.id, first));
        // The first attempt of each waits for the other to hold its first row: a deadlock.
        if (locked[me]++ === 0) {
          if (locked[0] > 0 && locked[1] > 0) bothLocked();
          await meet;
        }
        await tx
          .update(accounts)
          .set({ balance: sql`${accounts.balance} + 1` })
          .where(eq(accounts.id, second));
        return 'moved';
      });
    expect(await Promise.all([transfer(randomUUID(), a, b, 0), transfer(randomUUID(), b, a, 1)])).toEqual(['moved', 'moved']);
    expect([await ledger.balanceOf(a), await ledger.balanceOf(b)]).toEqual([100, 100]);
  });
});
