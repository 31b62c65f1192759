import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
} from '../../../lib/core/errors.js';
import type { IdempotencyEvent } from '../../../lib/core/events.js';
import { storageKeyOf } from '../../../lib/core/hash.js';
import {
  TypeOrmIdempotencyStore,
  executeIdempotentTransaction,
  getIdempotentEntityManager,
  runIdempotentTransaction,
} from '../../../lib/typeorm/index.js';
import { assumeClaimReturning } from '../../../lib/sql/dialects/mysql-server.js';
import { MAX_LOCK_RETRIES } from '../../../lib/typeorm/store/transaction.js';
import { Account, RefundRecord, refundEntities } from '../refund.entities.js';
import { gate, sleep, waitUntil } from '../support.js';
import { createMariaDataSource, killConnection, waitForLockWait } from './support.js';

describe.each([
  { server: 'MariaDB (claim with RETURNING)', returning: true },
  { server: 'MySQL 8 statements (claim, then a locking read)', returning: false },
])('exactly-once transactions on $server', ({ returning }) => {
  let db: Awaited<ReturnType<typeof createMariaDataSource>>;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    db = await createMariaDataSource({ entities: refundEntities, poolSize: 12 });
    dataSource = db.dataSource;
    assumeClaimReturning(dataSource, returning);
    store = new TypeOrmIdempotencyStore(dataSource);
    store.addEventListener((event) => void events.push(event));
    await store.ensureTable();
  });
  afterAll(async () => {
    await db.destroy();
  });

  async function newAccount(balance = 1000): Promise<number> {
    return (await dataSource.getRepository(Account).save({ balance })).id;
  }
  const balanceOf = async (id: number) => (await dataSource.getRepository(Account).findOneByOrFail({ id })).balance;

  function refund(messageId: string, accountId: number, amount: number, counter?: { runs: number }) {
    return async (manager: EntityManager) => {
      if (counter) counter.runs++;
      const row = await manager.save(RefundRecord, manager.create(RefundRecord, { idemKey: messageId, accountId, amount }));
      await manager.decrement(Account, { id: accountId }, 'balance', amount);
      await sleep(30); // keep the transaction open while the duplicates pile up on the record's row lock
      const { balance } = await manager.findOneByOrFail(Account, { id: accountId });
      return { refundId: row.id, balance };
    };
  }

  it('applies 50 concurrent duplicate refund messages exactly once, and all 50 callers get the same result', async () => {
    const accountId = await newAccount(1000);
    const messageId = randomUUID();
    const counter = { runs: 0 };
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, () =>
        executeIdempotentTransaction(
          dataSource,
          { key: messageId, scope: 'refunds', fingerprint: { accountId, amount: 25 } },
          refund(messageId, accountId, 25, counter),
        ),
      ),
    );
    expect(counter.runs).toBe(1);
    expect(outcomes.filter((o) => !o.replayed)).toHaveLength(1);
    const first = outcomes.find((o) => !o.replayed)!.value;
    expect(first.balance).toBe(975);
    for (const outcome of outcomes) expect(outcome.value).toEqual(first);
    expect(await balanceOf(accountId)).toBe(975);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
    expect(await store.get(storageKeyOf('refunds', messageId))).toMatchObject({ status: 'completed' });
  });

  it('lets duplicates that waited for a rolled-back first attempt settle it once (gap-lock deadlocks retried and reported)', async () => {
    const accountId = await newAccount(100);
    const messageId = randomUUID();
    const retries: IdempotencyEvent[] = [];
    let attempts = 0;
    const work = async (manager: EntityManager) => {
      const attempt = ++attempts;
      await refund(messageId, accountId, 10)(manager);
      if (attempt === 1) throw new Error('first attempt fails after writing');
      return { attempt };
    };
    const settled = await Promise.allSettled(
      Array.from({ length: 8 }, () => runIdempotentTransaction(dataSource, { key: messageId, onEvent: (e) => retries.push(e) }, work)),
    );
    const values = settled.filter((s) => s.status === 'fulfilled').map((s) => (s as PromiseFulfilledResult<{ attempt: number }>).value);
    expect(settled.filter((s) => s.status === 'rejected').map((s) => String((s as PromiseRejectedResult).reason))).toEqual([
      'Error: first attempt fails after writing',
    ]);
    expect(values).toHaveLength(7);
    expect(attempts).toBe(2);
    expect(new Set(values.map((v) => v.attempt))).toEqual(new Set([2]));
    expect(await balanceOf(accountId)).toBe(90);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
    // Whatever InnoDB made of the waiters (deadlocks are likely here), each retry was an event.
    for (const event of retries)
      expect(event).toMatchObject({ type: 'store_error', reason: expect.stringMatching(/InnoDB .* runs again/) });
  });

  it.each(['REPEATABLE READ', 'READ COMMITTED', 'SERIALIZABLE'] as const)(
    'replays to duplicates that waited under %s isolation',
    async (isolationLevel) => {
      const accountId = await newAccount(100);
      const messageId = randomUUID();
      const counter = { runs: 0 };
      const results = await Promise.all(
        Array.from({ length: 10 }, () =>
          runIdempotentTransaction(dataSource, { key: messageId, isolationLevel }, refund(messageId, accountId, 10, counter)),
        ),
      );
      expect(counter.runs).toBe(1);
      for (const result of results) expect(result).toEqual(results[0]);
      expect(await balanceOf(accountId)).toBe(90);
    },
  );

  it('runs a deadlocked transaction again inside the library, counts it, and applies the work once', async () => {
    const [a, b] = [await newAccount(100), await newAccount(100)];
    const messageId = randomUUID();
    const inside = gate();
    let runs = 0;
    // Another transaction holds B and has written a lot (InnoDB rolls back the smaller one).
    const holder = dataSource.createQueryRunner();
    await holder.connect();
    await holder.startTransaction();
    try {
      await holder.query('UPDATE accounts SET notes = ? WHERE id = ?', ['holder', b]);
      for (let i = 0; i < 20; i++) await holder.query('INSERT INTO accounts (balance, notes, version) VALUES (0, ?, 1)', ['filler']);
      const before = store.transactionRetries;
      const run = store.runTransactional({ key: storageKeyOf('deadlock', messageId), ttl: 60_000 }, async () => {
        const manager = getIdempotentEntityManager();
        runs++;
        await manager.decrement(Account, { id: a }, 'balance', 10);
        if (runs === 1) inside.open();
        await manager.decrement(Account, { id: b }, 'balance', 10); // waits for the holder
        return { value: runs, result: String(runs) };
      });
      await inside.promise;
      await waitForLockWait(dataSource, 'UPDATE%', 'the work to wait for B');
      await holder.query('UPDATE accounts SET notes = ? WHERE id = ?', ['holder', a]); // the cycle: InnoDB picks the work
      await holder.commitTransaction();
      expect(await run).toEqual({ kind: 'executed', value: 2 });
      expect(store.transactionRetries - before).toBe(1);
      expect(events.at(-1)).toMatchObject({ type: 'store_error', reason: expect.stringMatching(/InnoDB deadlock \(1213\).*retry 1 of/) });
      expect([await balanceOf(a), await balanceOf(b)]).toEqual([90, 90]);
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
  });

  it(`gives up after ${MAX_LOCK_RETRIES} retries with IdempotencyStoreUnavailableError (retriable), nothing committed`, async () => {
    const messageId = randomUUID();
    const seen: IdempotencyEvent[] = [];
    let runs = 0;
    const error = await runIdempotentTransaction(dataSource, { key: messageId, onEvent: (e) => seen.push(e) }, async () => {
      runs++;
      throw Object.assign(new Error('Deadlock found when trying to get lock; try restarting transaction'), {
        code: 'ER_LOCK_DEADLOCK',
        errno: 1213,
      });
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(((error as Error).cause as { errno: number }).errno).toBe(1213);
    expect(runs).toBe(MAX_LOCK_RETRIES + 1);
    expect(seen).toHaveLength(MAX_LOCK_RETRIES);
    expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
  });

  it('refuses the same key with a different fingerprint, and leaves no trace when the work throws', async () => {
    const accountId = await newAccount(50);
    const messageId = randomUUID();
    await expect(
      runIdempotentTransaction(dataSource, { key: messageId, fingerprint: { amount: 20 } }, async (manager) => {
        await refund(messageId, accountId, 20)(manager);
        throw new Error('payment provider down');
      }),
    ).rejects.toThrow('payment provider down');
    expect(await balanceOf(accountId)).toBe(50);
    expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    expect(
      (await runIdempotentTransaction(dataSource, { key: messageId, fingerprint: { amount: 20 } }, refund(messageId, accountId, 20)))
        .balance,
    ).toBe(30);
    await expect(
      runIdempotentTransaction(dataSource, { key: messageId, fingerprint: { amount: 21 } }, refund(messageId, accountId, 21)),
    ).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
  });

  it('runs the work again once the stored result has expired', async () => {
    const messageId = randomUUID();
    let runs = 0;
    const work = async () => ++runs;
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 1 }, work)).toBe(1);
    await waitUntil(async () => (await store.get(storageKeyOf('transaction', messageId))) === undefined, { what: 'the 1 ms retention' });
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 60_000 }, work)).toBe(2);
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 60_000 }, work)).toBe(2);
  });

  it('gives up waiting after waitTimeout (whole seconds) with IdempotencyInFlightError, and restores the session setting', async () => {
    const messageId = randomUUID();
    const started = gate();
    const finish = gate();
    const first = runIdempotentTransaction(dataSource, { key: messageId }, async () => {
      started.open();
      await finish.promise;
      return 'first';
    });
    await started.promise;
    await expect(runIdempotentTransaction(dataSource, { key: messageId, waitTimeout: 100 }, async () => 'second')).rejects.toBeInstanceOf(
      IdempotencyInFlightError,
    );
    finish.open();
    expect(await first).toBe('first');
    expect(await runIdempotentTransaction(dataSource, { key: messageId, waitTimeout: 100 }, async () => 'third')).toBe('first');
    const timeouts = await Promise.all(
      Array.from({ length: 12 }, () => dataSource.query('SELECT @@SESSION.innodb_lock_wait_timeout AS t')),
    );
    const [{ t: global }] = await dataSource.query('SELECT @@GLOBAL.innodb_lock_wait_timeout AS t');
    for (const [{ t }] of timeouts) expect(Number(t)).toBe(Number(global));
  });

  it('runTransactional: writes through getIdempotentEntityManager() commit with the record; a regular lease answers in flight; a dead one is taken over', async () => {
    const accountId = await newAccount(500);
    const key = 'k' + randomUUID().replace(/-/g, '');
    const outcome = await store.runTransactional({ key, fingerprint: 'fp-1', ttl: 60_000 }, async () => {
      await getIdempotentEntityManager().decrement(Account, { id: accountId }, 'balance', 7);
      return { value: { ok: true }, result: '{"stored":1}' };
    });
    expect(outcome).toEqual({ kind: 'executed', value: { ok: true } });
    expect(await balanceOf(accountId)).toBe(493);
    expect(await store.claim(key, { token: 't', leaseTtl: 10_000 })).toMatchObject({ claimed: false, record: { status: 'completed' } });
    expect(await store.runTransactional({ key, fingerprint: 'fp-1', ttl: 60_000 }, async () => ({ value: 0, result: 'x' }))).toEqual({
      kind: 'replay',
      result: '{"stored":1}',
    });

    const leased = 'k' + randomUUID().replace(/-/g, '');
    await store.claim(leased, { token: 't', leaseTtl: 10_000 });
    await expect(store.runTransactional({ key: leased, ttl: 60_000 }, async () => ({ value: 1, result: '1' }))).rejects.toBeInstanceOf(
      IdempotencyInFlightError,
    );

    const dead = 'k' + randomUUID().replace(/-/g, '');
    await store.claim(dead, { token: 't', leaseTtl: 1 });
    await waitUntil(async () => (await store.get(dead)) === undefined, { what: 'the 1 ms lease to expire' });
    expect(await store.runTransactional({ key: dead, ttl: 60_000 }, async () => ({ value: 1, result: 'won' }))).toEqual({
      kind: 'executed',
      value: 1,
    });
    expect(await store.complete(dead, 't', { result: 'stale', ttl: 60_000 })).toBe(false);
    expect(await store.get(dead)).toMatchObject({ status: 'completed', result: 'won' });
  });

  it('a connection killed under the work (KILL CONNECTION) is IdempotencyStoreUnavailableError; nothing commits, the retry applies once', async () => {
    const accountId = await newAccount(100);
    const messageId = randomUUID();
    const inside = gate<number>();
    const resume = gate();
    const run = runIdempotentTransaction(dataSource, { key: messageId }, async (manager) => {
      await manager.insert(RefundRecord, { idemKey: messageId, accountId, amount: 10 });
      const [{ id }] = await manager.query('SELECT CONNECTION_ID() AS id');
      inside.open(Number(id));
      await resume.promise;
      await manager.decrement(Account, { id: accountId }, 'balance', 10);
      return 'refunded';
    });
    await killConnection(dataSource, await inside.promise);
    resume.open();
    const error = await run.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(0);
    expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    await runIdempotentTransaction(dataSource, { key: messageId }, refund(messageId, accountId, 10));
    expect(await balanceOf(accountId)).toBe(90);
  });

  it('a connection killed while the work does not touch the database fails the record statement: unavailable, nothing commits', async () => {
    const messageId = randomUUID();
    const inside = gate<number>();
    const resume = gate();
    let runs = 0;
    const run = runIdempotentTransaction(dataSource, { key: messageId }, async (manager) => {
      runs++;
      const [{ id }] = await manager.query('SELECT CONNECTION_ID() AS id');
      inside.open(Number(id));
      await resume.promise;
      return 'computed without the database';
    });
    await killConnection(dataSource, await inside.promise);
    resume.open();
    await expect(run).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    expect(await runIdempotentTransaction(dataSource, { key: messageId }, async () => ++runs)).toBe(2);
  });

  it('joins a nested idempotent transaction to the outer one: both commit or neither', async () => {
    const outerKey = randomUUID();
    const innerKey = randomUUID();
    await expect(
      runIdempotentTransaction(dataSource, { key: outerKey }, async () => {
        await runIdempotentTransaction(dataSource, { key: innerKey }, async () => 'inner');
        throw new Error('outer fails');
      }),
    ).rejects.toThrow('outer fails');
    expect(await store.get(storageKeyOf('transaction', innerKey))).toBeUndefined();
    expect(
      await runIdempotentTransaction(dataSource, { key: outerKey }, async () =>
        runIdempotentTransaction(dataSource, { key: innerKey }, async () => 'inner'),
      ),
    ).toBe('inner');
    expect(await store.get(storageKeyOf('transaction', innerKey))).toMatchObject({ status: 'completed' });
  });
});
