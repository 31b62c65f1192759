import { randomUUID } from 'node:crypto';
import { QueryFailedError, type DataSource, type EntityManager } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from '../../lib/core/errors.js';
import { storageKeyOf } from '../../lib/core/hash.js';
import { deserializeOutcome } from '../../lib/core/outcome.js';
import {
  TypeOrmIdempotencyStore,
  executeIdempotentTransaction,
  getIdempotentEntityManager,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { Account, RefundRecord, refundEntities } from './refund.entities.js';
import { createPgDataSource, gate, sleep, waitUntil } from './support.js';

describe('exactly-once transactions on PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createPgDataSource>>;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    db = await createPgDataSource({ entities: refundEntities, poolSize: 12 });
    dataSource = db.dataSource;
    store = new TypeOrmIdempotencyStore(dataSource);
    await store.ensureTable();
  });
  afterAll(async () => {
    await db.destroy();
  });

  it('prepares its record statements on the transaction connection, unless preparedStatements is false', async () => {
    for (const preparedStatements of [true, false]) {
      // One connection, so the session whose prepared statements we list is the transaction's.
      const single = await createPgDataSource({ poolSize: 1 });
      try {
        await new TypeOrmIdempotencyStore(single.dataSource).ensureTable();
        const key = randomUUID();
        const run = () => runIdempotentTransaction(single.dataSource, { key, preparedStatements }, async () => ({ ok: true }));
        await expect(run()).resolves.toEqual({ ok: true });
        await expect(run()).resolves.toEqual({ ok: true });
        const rows: { name: string }[] = await single.dataSource.query('SELECT name FROM pg_prepared_statements');
        // insertIfAbsent and finish for the first run, readAny for the replay.
        expect(rows.filter((row) => row.name.startsWith('nestjs_idem_'))).toHaveLength(preparedStatements ? 3 : 0);
      } finally {
        await single.destroy();
      }
    }
  });

  async function newAccount(balance = 1000): Promise<number> {
    return (await dataSource.getRepository(Account).save({ balance })).id;
  }

  /** The refund handler of the example: one refund row, one balance change, one result. */
  function refund(messageId: string, accountId: number, amount: number, counter?: { runs: number }) {
    return async (manager: EntityManager) => {
      if (counter) counter.runs++;
      const row = await manager.save(RefundRecord, manager.create(RefundRecord, { idemKey: messageId, accountId, amount }));
      await manager.decrement(Account, { id: accountId }, 'balance', amount);
      await sleep(30); // keep the transaction open while the duplicates pile up on the unique index
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
    expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(975);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
    // The record is the ordinary completed record, readable through the store.
    const record = await store.get(storageKeyOf('refunds', messageId));
    expect(record?.status).toBe('completed');
    expect(deserializeOutcome(record!.status === 'completed' ? record!.result : '')).toEqual({
      kind: 'value',
      value: { t: 'j', v: first },
    });
  });

  it('lets a duplicate that waited for a rolled-back first attempt run the work itself', async () => {
    const accountId = await newAccount(100);
    const messageId = randomUUID();
    let attempts = 0;
    const work = async (manager: EntityManager) => {
      const attempt = ++attempts;
      await refund(messageId, accountId, 10)(manager);
      if (attempt === 1) throw new Error('first attempt fails after writing');
      return { attempt };
    };
    const settled = await Promise.allSettled(
      Array.from({ length: 8 }, () => runIdempotentTransaction(dataSource, { key: messageId }, work)),
    );
    const values = settled.filter((s) => s.status === 'fulfilled').map((s) => (s as PromiseFulfilledResult<{ attempt: number }>).value);
    expect(settled.filter((s) => s.status === 'rejected')).toHaveLength(1);
    expect(values).toHaveLength(7);
    expect(attempts).toBe(2);
    expect(new Set(values.map((v) => v.attempt))).toEqual(new Set([2]));
    expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(90);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
  });

  it.each(['REPEATABLE READ', 'SERIALIZABLE'] as const)(
    'still replays to duplicates that waited under %s isolation',
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
      expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(90);
    },
  );

  it('refuses the same key with a different fingerprint', async () => {
    const accountId = await newAccount();
    const messageId = randomUUID();
    await runIdempotentTransaction(dataSource, { key: messageId, fingerprint: { amount: 5 } }, refund(messageId, accountId, 5));
    await expect(
      runIdempotentTransaction(dataSource, { key: messageId, fingerprint: { amount: 6 } }, refund(messageId, accountId, 6)),
    ).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(995);
  });

  it('leaves no trace when the work throws, so the retry runs cleanly', async () => {
    const accountId = await newAccount(50);
    const messageId = randomUUID();
    await expect(
      runIdempotentTransaction(dataSource, { key: messageId }, async (manager) => {
        await refund(messageId, accountId, 20)(manager);
        throw new Error('payment provider down');
      }),
    ).rejects.toThrow('payment provider down');
    expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(50);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(0);
    expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    const retried = await runIdempotentTransaction(dataSource, { key: messageId }, refund(messageId, accountId, 20));
    expect(retried.balance).toBe(30);
  });

  it('runs the work again once the stored result has expired', async () => {
    const messageId = randomUUID();
    let runs = 0;
    const work = async () => ++runs;
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 1 }, work)).toBe(1);
    const storageKey = storageKeyOf('transaction', messageId);
    await waitUntil(async () => (await store.get(storageKey)) === undefined, { what: 'the 1 ms retention to pass' });
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 60_000 }, work)).toBe(2);
    // Within the new retention it replays again.
    expect(await runIdempotentTransaction(dataSource, { key: messageId, ttl: 60_000 }, work)).toBe(2);
    expect(runs).toBe(2);
  });

  it('gives up waiting after waitTimeout with IdempotencyInFlightError, without disturbing the first transaction', async () => {
    const messageId = randomUUID();
    let finishFirst!: () => void;
    const gate = new Promise<void>((resolve) => (finishFirst = resolve));
    let entered!: () => void;
    const started = new Promise<void>((resolve) => (entered = resolve));
    const first = runIdempotentTransaction(dataSource, { key: messageId }, async () => {
      entered();
      await gate;
      return 'first';
    });
    await started;
    await expect(runIdempotentTransaction(dataSource, { key: messageId, waitTimeout: 100 }, async () => 'second')).rejects.toBeInstanceOf(
      IdempotencyInFlightError,
    );
    finishFirst();
    expect(await first).toBe('first');
    expect(await runIdempotentTransaction(dataSource, { key: messageId, waitTimeout: 100 }, async () => 'third')).toBe('first');
  });

  describe('TypeOrmIdempotencyStore.runTransactional (the @Idempotent({ transactional: true }) path)', () => {
    it('commits the handler writes made through getIdempotentEntityManager() with the record, readable by the regular methods', async () => {
      const accountId = await newAccount(500);
      const key = 'k' + randomUUID().replace(/-/g, '');
      const outcome = await store.runTransactional({ key, fingerprint: 'fp-1', ttl: 60_000 }, async () => {
        const manager = getIdempotentEntityManager();
        await manager.decrement(Account, { id: accountId }, 'balance', 7);
        return { value: { ok: true }, result: '{"stored":1}' };
      });
      expect(outcome).toEqual({ kind: 'executed', value: { ok: true } });
      expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(493);
      expect(await store.get(key)).toMatchObject({ status: 'completed', result: '{"stored":1}', fingerprint: 'fp-1' });
      const claim = await store.claim(key, { token: 't', leaseTtl: 10_000 });
      expect(claim).toMatchObject({ claimed: false, record: { status: 'completed', result: '{"stored":1}' } });
      const replay = await store.runTransactional({ key, fingerprint: 'fp-1', ttl: 60_000 }, async () => ({
        value: { ok: false },
        result: 'x',
      }));
      expect(replay).toEqual({ kind: 'replay', result: '{"stored":1}' });
      await expect(
        store.runTransactional({ key, fingerprint: 'fp-2', ttl: 60_000 }, async () => ({ value: 1, result: 'x' })),
      ).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    });

    it('answers IdempotencyInFlightError while the key is leased through the regular claim path', async () => {
      const key = 'k' + randomUUID().replace(/-/g, '');
      await store.claim(key, { token: 't', leaseTtl: 10_000 });
      await expect(store.runTransactional({ key, ttl: 60_000 }, async () => ({ value: 1, result: '1' }))).rejects.toBeInstanceOf(
        IdempotencyInFlightError,
      );
    });

    it('takes over an expired lease of the regular path', async () => {
      const key = 'k' + randomUUID().replace(/-/g, '');
      await store.claim(key, { token: 't', leaseTtl: 1 });
      await waitUntil(async () => (await store.get(key)) === undefined, { what: 'the 1 ms lease to expire' });
      expect(await store.runTransactional({ key, ttl: 60_000 }, async () => ({ value: 1, result: 'won' }))).toEqual({
        kind: 'executed',
        value: 1,
      });
      expect(await store.complete(key, 't', { result: 'stale', ttl: 60_000 })).toBe(false);
      expect(await store.get(key)).toMatchObject({ status: 'completed', result: 'won' });
    });

    it('explains getIdempotentEntityManager() outside a transactional handler', () => {
      expect(() => getIdempotentEntityManager()).toThrow(IdempotencyConfigurationError);
      expect(() => getIdempotentEntityManager()).toThrow(/outside an idempotent transaction/);
    });
  });

  describe('when the connection of the transaction is cut (pg_terminate_backend)', () => {
    /** Ends the transaction's backend from another session and waits until the server has let it go. */
    /** Backends these tests cut, whose clients must have left the pool before the next test draws one. */
    const terminated = new Set<number>();
    afterEach(async () => {
      // A cut client leaves pg's pool when its connection's end is read, which can come
      // after the runner released it: the next test would otherwise draw a dead client.
      const pool = (dataSource.driver as unknown as { master: { _clients: Array<{ processID: number | null }> } }).master;
      await waitUntil(async () => !pool._clients.some((client) => client.processID !== null && terminated.has(client.processID)), {
        what: 'the pool to drop the clients of the cut backends',
      });
      terminated.clear();
    });

    async function terminate(pid: number) {
      terminated.add(pid);
      await dataSource.query('SELECT pg_terminate_backend($1)', [pid]);
      await waitUntil(async () => (await dataSource.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).length === 0, {
        what: `backend ${pid} to end`,
      });
    }

    async function backendOf(manager: EntityManager): Promise<number> {
      const [{ pid }] = await manager.query('SELECT pg_backend_pid() AS pid');
      return Number(pid);
    }

    /**
     * Runs `body` inside the transaction through each entry point: the caller of
     * `runIdempotentTransaction` outside Nest, and `runTransactional` under @Idempotent().
     */
    const entryPoints = {
      runIdempotentTransaction: (key: string, body: (manager: EntityManager) => Promise<unknown>) =>
        runIdempotentTransaction(dataSource, { key }, body),
      'TypeOrmIdempotencyStore.runTransactional': (key: string, body: (manager: EntityManager) => Promise<unknown>) =>
        store.runTransactional({ key: storageKeyOf('transaction', key), ttl: 60_000 }, async () => ({
          value: await body(getIdempotentEntityManager()),
          result: '"stored"',
        })),
    };

    it.each(Object.keys(entryPoints) as Array<keyof typeof entryPoints>)(
      '%s: a cut the work runs into is IdempotencyStoreUnavailableError with the driver error as cause; nothing commits',
      async (entry) => {
        const accountId = await newAccount(100);
        const messageId = randomUUID();
        const inside = gate<number>();
        const resume = gate();
        const run = entryPoints[entry](messageId, async (manager) => {
          await manager.insert(RefundRecord, { idemKey: messageId, accountId, amount: 10 });
          inside.open(await backendOf(manager));
          await resume.promise;
          await manager.decrement(Account, { id: accountId }, 'balance', 10);
          return 'refunded';
        });
        await terminate(await inside.promise);
        resume.open();
        const error = await run.then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
        const cause = (error as Error).cause as Error;
        expect(['QueryFailedError', 'QueryRunnerAlreadyReleasedError']).toContain(cause.name);
        expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(0);
        expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
        // Nothing committed, so the retry the 503 asks for applies the refund exactly once.
        await runIdempotentTransaction(dataSource, { key: messageId }, refund(messageId, accountId, 10));
        expect((await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance).toBe(90);
      },
    );

    it('a cut during a statement of the work (SQLSTATE 57P01) is IdempotencyStoreUnavailableError too', async () => {
      const messageId = randomUUID();
      const inside = gate<number>();
      const run = runIdempotentTransaction(dataSource, { key: messageId }, async (manager) => {
        inside.open(await backendOf(manager));
        return manager.query('SELECT pg_sleep(60)');
      });
      const pid = await inside.promise;
      await waitUntil(
        async () => (await dataSource.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%'`, [pid])).length > 0,
        { what: 'the work to be inside pg_sleep' },
      );
      await terminate(pid);
      const error = await run.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
      const cause = (error as Error).cause as { name: string; driverError?: { code?: string } };
      expect(cause.name).toBe('QueryFailedError');
      expect(cause.driverError?.code).toBe('57P01');
      expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
    });

    it('a cut the work does not notice fails the record statement: IdempotencyStoreUnavailableError, nothing commits', async () => {
      const messageId = randomUUID();
      const inside = gate<number>();
      const resume = gate();
      let runs = 0;
      const run = runIdempotentTransaction(dataSource, { key: messageId }, async (manager) => {
        runs++;
        inside.open(await backendOf(manager));
        await resume.promise;
        return 'computed without the database';
      });
      await terminate(await inside.promise);
      resume.open();
      await expect(run).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
      expect(await store.get(storageKeyOf('transaction', messageId))).toBeUndefined();
      expect(await runIdempotentTransaction(dataSource, { key: messageId }, async () => ++runs)).toBe(2);
    });

    it("passes the work's own errors through unchanged, after a cut too", async () => {
      const inside = gate<number>();
      const resume = gate();
      const businessError = new Error('refund limit exceeded');
      const run = runIdempotentTransaction(dataSource, { key: randomUUID() }, async (manager) => {
        inside.open(await backendOf(manager));
        await resume.promise;
        throw businessError;
      });
      await terminate(await inside.promise);
      resume.open();
      await expect(run).rejects.toBe(businessError);
    });

    it("passes the work's own driver errors through unchanged, a missing table of its own included", async () => {
      const error = await runIdempotentTransaction(dataSource, { key: randomUUID() }, async (manager) =>
        manager.query('SELECT * FROM "no_such_business_table"'),
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(QueryFailedError);
      expect(isIdempotencyError(error)).toBe(false);
    });
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
    const result = await runIdempotentTransaction(dataSource, { key: outerKey }, async (manager) => {
      expect(getIdempotentEntityManager()).toBe(manager);
      return runIdempotentTransaction(dataSource, { key: innerKey }, async () => 'inner');
    });
    expect(result).toBe('inner');
    expect(await store.get(storageKeyOf('transaction', innerKey))).toMatchObject({ status: 'completed' });
  });
});
