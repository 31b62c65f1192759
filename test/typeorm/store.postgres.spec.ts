import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import {
  CreateIdempotencyRecords1700000000000,
  IdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
  createIdempotencyRecordEntity,
  createIdempotencyRecordsMigration,
} from '../../lib/typeorm/index.js';
import { createPgDataSource, uniqueName, waitUntil } from './support.js';

// The migration creates the default table in a schema of this run; the contract runs on it.
describeStoreContract('TypeOrmIdempotencyStore (PostgreSQL)', async () => {
  const db = await createPgDataSource({ migrations: [CreateIdempotencyRecords1700000000000], synchronize: false, poolSize: 10 });
  await db.dataSource.runMigrations();
  return { store: new TypeOrmIdempotencyStore(db.dataSource), dispose: () => db.destroy() };
});

describe('TypeOrmIdempotencyStore on PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createPgDataSource>>;
  let dataSource: DataSource;
  const key = () => 'k' + randomUUID().replace(/-/g, '');

  beforeAll(async () => {
    db = await createPgDataSource({ poolSize: 10, synchronize: false });
    dataSource = db.dataSource;
  });
  afterAll(async () => {
    await db.destroy();
  });

  async function newStore(options: ConstructorParameters<typeof TypeOrmIdempotencyStore>[1] = {}) {
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: uniqueName('records'), ...options });
    await store.ensureTable();
    return store;
  }

  /**
   * An uncommitted lease on key `k` of `table`, in a transaction of its own: a claim's
   * snapshot cannot see it, and its insert waits on the unique index until it ends.
   */
  async function uncommittedLease(table: string, k: string) {
    const holder = dataSource.createQueryRunner();
    await holder.connect();
    try {
      await holder.startTransaction();
      await holder.query(
        `INSERT INTO ${table} (key, status, lease_token, lease_expires_at, expires_at, created_at)
         SELECT $1, 'in_progress', 'holder', now_ms + 60000, now_ms + 60000, now_ms
         FROM (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms) c`,
        [k],
      );
      return holder;
    } catch (error) {
      await holder.release();
      throw error;
    }
  }

  it('runs its statements as named prepared statements on the pool, reported to the DataSource logger', async () => {
    // One connection, so the session whose prepared statements we list is the store's.
    const single = await createPgDataSource({ poolSize: 1, synchronize: false });
    const logged: string[] = [];
    single.dataSource.logger.logQuery = (query: string) => void logged.push(query);
    try {
      const store = new TypeOrmIdempotencyStore(single.dataSource, { tableName: uniqueName('prepared') });
      await store.ensureTable();
      const k = key();
      const token = randomUUID();
      expect((await store.claim(k, { token, leaseTtl: 10_000 })).claimed).toBe(true);
      expect(await store.complete(k, token, { result: 'r', ttl: 60_000 })).toBe(true);
      expect(await store.claim(k, { token: randomUUID(), leaseTtl: 10_000 })).toMatchObject({
        claimed: false,
        record: { status: 'completed', result: 'r' },
      });
      const rows: { name: string; statement: string }[] = await single.dataSource.query(
        'SELECT name, statement FROM pg_prepared_statements',
      );
      const ours = rows.filter((row) => row.name.startsWith('nestjs_idem_'));
      // claim and complete: two statements, each prepared once however often it ran.
      expect(ours).toHaveLength(2);
      expect(ours.some((row) => row.statement.includes('INSERT INTO'))).toBe(true);
      expect(ours.some((row) => row.statement.startsWith('UPDATE'))).toBe(true);
      expect(logged.filter((query) => query.includes('INSERT INTO'))).toHaveLength(2);
    } finally {
      await single.destroy();
    }
  });

  it('sends unnamed statements with preparedStatements: false (for poolers that cannot keep them)', async () => {
    const single = await createPgDataSource({ poolSize: 1, synchronize: false });
    try {
      const store = new TypeOrmIdempotencyStore(single.dataSource, { tableName: uniqueName('unprepared'), preparedStatements: false });
      await store.ensureTable();
      const k = key();
      const token = randomUUID();
      expect((await store.claim(k, { token, leaseTtl: 10_000 })).claimed).toBe(true);
      expect(await store.complete(k, token, { result: 'r', ttl: 60_000 })).toBe(true);
      const rows: { name: string }[] = await single.dataSource.query('SELECT name FROM pg_prepared_statements');
      expect(rows.filter((row) => row.name.startsWith('nestjs_idem_'))).toHaveLength(0);
      expect(await store.get(k)).toMatchObject({ status: 'completed', result: 'r' });
    } finally {
      await single.destroy();
    }
  });

  it('answers every one of 50 concurrent claims: one winner, 49 get the winner record, even across snapshots', async () => {
    const store = await newStore();
    // Many rounds on fresh keys: each round races 50 claims through 10 connections, which is
    // where a statement can start before the winner commits and conflict after it.
    for (let round = 0; round < 10; round++) {
      const k = key();
      const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(k, { token: randomUUID(), leaseTtl: 10_000 })));
      const winners = results.filter((r) => r.claimed);
      expect(winners).toHaveLength(1);
      const winnerToken = winners[0].record.status === 'in_progress' && winners[0].record.leaseToken;
      for (const r of results) {
        expect(r.record).toMatchObject({ status: 'in_progress', key: k, leaseToken: winnerToken });
      }
    }
  });

  it('runs the claim statement again when the blocking row commits after its snapshot (claimRetries counts it)', async () => {
    const store = await newStore();
    const k = key();
    const holder = await uncommittedLease(store.tableName, k);
    try {
      const before = store.claimRetries;
      const claim = store.claim(k, { token: 'late', leaseTtl: 10_000 });
      await waitUntil(
        async () =>
          (
            await dataSource.query(
              `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH clock AS%' AND position($1 in query) > 0`,
              [store.tableName],
            )
          ).length > 0,
        { what: 'the claim to wait on the uncommitted row' },
      );
      await holder.commitTransaction();
      // The first statement returns nothing (the row is neither in its snapshot nor dead);
      // the second sees the committed lease and reports it.
      expect(await claim).toMatchObject({ claimed: false, record: { status: 'in_progress', leaseToken: 'holder' } });
      expect(store.claimRetries - before).toBe(1);
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
  });

  it('destroys the connection of a claim stuck past statementTimeout instead of returning it to the pool', async () => {
    const own = await createPgDataSource({ poolSize: 2, synchronize: false, schema: db.schema });
    const pool = (own.dataSource.driver as unknown as { master: { _clients: Array<{ processID: number | null }> } }).master;
    const store = new TypeOrmIdempotencyStore(own.dataSource, { tableName: uniqueName('stuck'), statementTimeout: 300 });
    await store.ensureTable();
    const k = key();
    // The claim's insert waits on the uncommitted lease for as long as its transaction lasts.
    const holder = await uncommittedLease(store.tableName, k);
    try {
      const claim = store.claim(k, { token: 'stuck', leaseTtl: 10_000 });
      let stuckPid = 0;
      await waitUntil(
        async () => {
          const rows: Array<{ pid: number }> = await dataSource.query(
            `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`,
            [store.tableName],
          );
          stuckPid = rows[0]?.pid ?? 0;
          return stuckPid !== 0;
        },
        { what: 'the claim to wait on the uncommitted row' },
      );
      expect(pool._clients.map((client) => client.processID)).toContain(stuckPid);
      await expect(claim).rejects.toMatchObject({ name: 'StatementDeadlineError', code: 'ETIMEDOUT' });
      // The lock is still held: only a destroyed connection leaves the pool now.
      await waitUntil(async () => !pool._clients.some((client) => client.processID === stuckPid), {
        what: 'the pool to drop the connection of the stuck claim',
      });
      expect(holder.isTransactionActive).toBe(true);
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
      await own.dataSource.destroy();
    }
  });

  it('takes over a dead lease exactly once when 30 claims race for it', async () => {
    const store = await newStore();
    const k = key();
    await store.claim(k, { token: 'old', leaseTtl: 1 });
    await waitUntil(async () => (await store.get(k)) === undefined, { what: 'the 1 ms lease to expire on the database clock' });
    const results = await Promise.all(Array.from({ length: 30 }, () => store.claim(k, { token: randomUUID(), leaseTtl: 10_000 })));
    const winners = results.filter((r) => r.claimed);
    expect(winners).toHaveLength(1);
    const winnerToken = winners[0].record.status === 'in_progress' && winners[0].record.leaseToken;
    // Nobody is handed the dead record: losers see the new owner.
    for (const r of results) expect(r.record).toMatchObject({ status: 'in_progress', leaseToken: winnerToken });
  });

  it('answers a duplicate claim without taking a row lock (a replay is read-only)', async () => {
    const store = await newStore();
    const k = key();
    await store.claim(k, { token: 't', leaseTtl: 10_000 });
    await store.complete(k, 't', { result: 'r', ttl: 60_000 });
    const holder = dataSource.createQueryRunner();
    await holder.connect();
    await holder.startTransaction();
    try {
      await holder.query(`SELECT 1 FROM ${store.tableName} WHERE key = $1 FOR UPDATE`, [k]);
      // Would wait for the holder's commit if the claim locked the row (ON CONFLICT DO UPDATE does).
      const duplicate = await store.claim(k, { token: 'u', leaseTtl: 10_000 });
      expect(duplicate).toMatchObject({ claimed: false, record: { status: 'completed', result: 'r' } });
    } finally {
      await holder.rollbackTransaction();
      await holder.release();
    }
  });

  it('uses the database clock for expiry', async () => {
    const store = await newStore();
    const k = key();
    const [{ now }] = await dataSource.query(`SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now`);
    const claim = await store.claim(k, { token: 't', leaseTtl: 60_000 });
    const [{ lease, created }] = await dataSource.query(
      `SELECT lease_expires_at AS lease, created_at AS created FROM ${store.tableName} WHERE key = $1`,
      [k],
    );
    expect(Number(created)).toBeGreaterThanOrEqual(Number(now));
    expect(Number(lease)).toBe(Number(created) + 60_000);
    expect(claim.record.status === 'in_progress' && claim.record.leaseExpiresAt).toBe(Number(lease));
  });

  it('stores completed records in the documented columns', async () => {
    const store = await newStore();
    const k = key();
    await store.claim(k, { token: 't1', leaseTtl: 10_000, fingerprint: 'fp' });
    await store.complete(k, 't1', { result: '{"ok":true}', ttl: 60_000 });
    const [row] = await dataSource.query(`SELECT * FROM ${store.tableName} WHERE key = $1`, [k]);
    expect(row).toMatchObject({
      key: k,
      status: 'completed',
      lease_token: null,
      lease_expires_at: null,
      fingerprint: 'fp',
      result: '{"ok":true}',
    });
    expect(Number(row.expires_at)).toBeGreaterThan(Number(row.created_at));
  });

  it('purges expired records and keeps live ones', async () => {
    const store = await newStore({ purgeBatchSize: 3 });
    const live = [key(), key()];
    const dead = [key(), key(), key(), key(), key()];
    await store.claim(live[0], { token: 't', leaseTtl: 60_000 });
    await store.claim(live[1], { token: 't', leaseTtl: 60_000 });
    await store.complete(live[1], 't', { result: 'r', ttl: 60_000 });
    for (const [i, k] of dead.entries()) {
      await store.claim(k, { token: 't', leaseTtl: i % 2 === 0 ? 1 : 10_000 });
      if (i % 2 === 1) await store.complete(k, 't', { result: 'r', ttl: 1 });
    }
    // get() and the purge read the same (database) clock: once none is readable, all are purgeable.
    await waitUntil(async () => (await Promise.all(dead.map((k) => store.get(k)))).every((r) => r === undefined), {
      what: 'the dead records to expire',
    });
    const result = await store.purgeExpired();
    expect(result).toEqual({ ran: true, deleted: dead.length });
    const rows: Array<{ key: string }> = await dataSource.query(`SELECT key FROM ${store.tableName} ORDER BY key`);
    expect(rows.map((r) => r.key).sort()).toEqual([...live].sort());
    expect(await store.purgeExpired()).toEqual({ ran: true, deleted: 0 });
  });

  it('deletes a purge batch by index even on the generic plan PostgreSQL keeps for a prepared statement after five runs', async () => {
    const store = await newStore();
    const sent: string[] = [];
    const logQuery = dataSource.logger.logQuery.bind(dataSource.logger);
    dataSource.logger.logQuery = (query: string, parameters?: unknown[]) => {
      sent.push(query);
      logQuery(query, parameters);
    };
    try {
      await store.purgeExpired();
    } finally {
      dataSource.logger.logQuery = logQuery;
    }
    const batch = sent.find((query) => query.startsWith('DELETE'));
    expect(batch).toBeDefined();
    // 200 000 rows, every other one expired: enough for a plan that scans the table to be the planner's choice.
    await dataSource.query(
      `INSERT INTO ${store.tableName} ("key", "status", "fingerprint", "result", "expires_at", "created_at")
       SELECT 'p' || g, 'completed', 'f', repeat('x', 200), CASE WHEN g % 2 = 0 THEN g ELSE 9999999999999 END, 0 FROM generate_series(1, 200000) g`,
    );
    await dataSource.query(`ANALYZE ${store.tableName}`);
    const runner = dataSource.createQueryRunner();
    try {
      await runner.query('BEGIN');
      await runner.query(`SET LOCAL plan_cache_mode = force_generic_plan`);
      await runner.query(`PREPARE purge_plan_probe(integer) AS ${batch}`);
      const [{ 'QUERY PLAN': plan }] = await runner.query('EXPLAIN (FORMAT JSON) EXECUTE purge_plan_probe(1000)');
      const nodes: string[] = [];
      const walk = (node: { 'Node Type': string; Plans?: unknown[] }) => {
        nodes.push(node['Node Type']);
        for (const child of node.Plans ?? []) walk(child as typeof node);
      };
      walk(plan[0].Plan);
      expect({ nodes, seqScan: nodes.includes('Seq Scan') }).toEqual({ nodes, seqScan: false });
    } finally {
      await runner.query('ROLLBACK').catch(() => undefined);
      await runner.query('DEALLOCATE purge_plan_probe').catch(() => undefined);
      await runner.release();
    }
    expect(await store.purgeExpired()).toEqual({ ran: true, deleted: 100_000 });
  }, 60_000);

  it('lets only one of two concurrent purges (two app instances) run, through the advisory lock', async () => {
    const tableName = uniqueName('records');
    const other = await createPgDataSource({ schema: db.schema, synchronize: false, poolSize: 3 });
    const storeA = new TypeOrmIdempotencyStore(dataSource, { tableName });
    const storeB = new TypeOrmIdempotencyStore(other.dataSource, { tableName });
    await storeA.ensureTable();
    for (let i = 0; i < 20; i++) await storeA.claim(key(), { token: 't', leaseTtl: 1 });
    await waitUntil(
      async () =>
        (
          await dataSource.query(
            `SELECT 1 FROM ${storeA.tableName} WHERE expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint LIMIT 1`,
          )
        ).length === 0,
      { what: 'the 20 leases to expire' },
    );
    // Hold the table so the first purge, once it owns the advisory lock, stays inside it.
    const blocker = dataSource.createQueryRunner();
    await blocker.connect();
    await blocker.startTransaction();
    await blocker.query(`LOCK TABLE ${storeA.tableName} IN ACCESS EXCLUSIVE MODE`);
    try {
      const first = storeA.purgeExpired();
      await waitUntil(async () => {
        // Not on the blocker: pg_stat_activity is a snapshot frozen for a transaction's duration.
        const [{ n }] = await dataSource.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM%' AND position($1 in query) > 0`,
          [storeA.tableName],
        );
        return n > 0;
      });
      const second = await storeB.purgeExpired();
      expect(second).toEqual({ ran: false, deleted: 0 });
      await blocker.commitTransaction();
      expect(await first).toEqual({ ran: true, deleted: 20 });
    } finally {
      if (blocker.isTransactionActive) await blocker.rollbackTransaction();
      await blocker.release();
    }
    // The lock is released afterwards: the other instance can purge again.
    expect((await storeB.purgeExpired()).ran).toBe(true);
    await other.destroy(false);
  });

  it('runs the purge job on an interval, unref’d, and stops on close()', async () => {
    const results: Array<{ ran: boolean; deleted: number }> = [];
    const setIntervalSpy = jest.spyOn(global, 'setInterval');
    const clearIntervalSpy = jest.spyOn(global, 'clearInterval');
    try {
      const store = await newStore({ purgeInterval: 25, onPurge: (r) => results.push(r) });
      const timer = setIntervalSpy.mock.results[setIntervalSpy.mock.calls.findIndex((call) => call[1] === 25)]?.value as NodeJS.Timeout;
      expect(timer).toBeDefined();
      expect(timer.hasRef()).toBe(false);
      try {
        const k = key();
        await store.claim(k, { token: 't', leaseTtl: 1 });
        // onPurge runs after the purge committed and let go of its lock, so the row can be
        // seen gone before the result arrives: wait for the result, then check the row.
        await waitUntil(() => results.some((r) => r.ran && r.deleted >= 1), { what: 'a scheduled purge that deleted a row' });
        expect(await dataSource.query(`SELECT 1 FROM ${store.tableName} WHERE key = $1`, [k])).toEqual([]);
      } finally {
        await store.close();
      }
      // Observed on the timer itself rather than by waiting for ticks that should not come.
      expect(clearIntervalSpy).toHaveBeenCalledWith(timer);
    } finally {
      setIntervalSpy.mockRestore();
      clearIntervalSpy.mockRestore();
    }
  });

  it('creates the same table from the migration as from the entity (synchronize has nothing to change)', async () => {
    const checked = await createPgDataSource({
      entities: [IdempotencyRecordEntity],
      migrations: [CreateIdempotencyRecords1700000000000],
      synchronize: false,
      poolSize: 2,
    });
    try {
      await checked.dataSource.runMigrations();
      const pending = await checked.dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((q) => q.query)).toEqual([]);
      // Running it again is harmless.
      await new CreateIdempotencyRecords1700000000000().up(checked.dataSource.createQueryRunner());
    } finally {
      await checked.destroy();
    }
  });

  it('uses a custom table through an entity factory, a migration factory and the entity option', async () => {
    const tableName = uniqueName('custom_records');
    const Entity = createIdempotencyRecordEntity(tableName);
    const Migration = createIdempotencyRecordsMigration(tableName, { timestamp: 1735000000000 });
    const custom = await createPgDataSource({ entities: [Entity], migrations: [Migration], synchronize: false, poolSize: 2 });
    try {
      const ran = await custom.dataSource.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([`CreateIdempotencyRecords_${tableName}1735000000000`]);
      expect((await custom.dataSource.driver.createSchemaBuilder().log()).upQueries).toEqual([]);
      const store = new TypeOrmIdempotencyStore(custom.dataSource, { entity: Entity });
      expect(store.tableName).toBe(`"${custom.schema}"."${tableName}"`);
      const k = key();
      await store.claim(k, { token: 't', leaseTtl: 10_000 });
      await store.complete(k, 't', { result: 'done', ttl: 10_000 });
      const row = await custom.dataSource.getRepository(Entity).findOneByOrFail({ key: k });
      expect(row).toMatchObject({ key: k, status: 'completed', result: 'done', leaseToken: null });
      expect(typeof row.expiresAt).toBe('number');
    } finally {
      await custom.destroy();
    }
  });

  it('refuses a table name that is not a plain identifier', () => {
    expect(() => new TypeOrmIdempotencyStore(dataSource, { tableName: 'x"; DROP TABLE y; --' }).tableName).toThrow(
      /Invalid idempotency table name/,
    );
  });

  it('answers ping', async () => {
    const store = await newStore();
    await expect(store.ping()).resolves.toBeUndefined();
  });
});
