import { randomUUID } from 'node:crypto';
import type { DataSource, Logger } from 'typeorm';
import { IdempotencyConfigurationError } from '../../../lib/core/errors.js';
import { describeStoreContract } from '../../../lib/testing/store-contract.js';
import {
  CreateIdempotencyRecords1700000000000,
  IdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
  createIdempotencyRecordEntity,
  createIdempotencyRecordsMigration,
} from '../../../lib/typeorm/index.js';
import { assumeClaimReturning, claimReturningOf, supportsInsertReturning } from '../../../lib/sql/dialects/mysql-server.js';
import { typeormDatabaseOf } from '../../../lib/typeorm/store/database.js';
import { sqlExecutorOf } from '../../../lib/typeorm/store/sql-executor.js';
import { purgeLockNameOf } from '../../../lib/sql/dialects/mysql.js';
import { uniqueName, waitUntil } from '../support.js';
import { createMariaDataSource, mariaNowMs } from './support.js';

// The migration creates the default table; the contract runs on it, once with MariaDB's
// claim (INSERT ... RETURNING) and once with MySQL 8's (no RETURNING: the insert id, then
// a read), which MariaDB accepts as well.
describeStoreContract('TypeOrmIdempotencyStore (MariaDB, mariadb driver)', async () => {
  const db = await createMariaDataSource({ migrations: [CreateIdempotencyRecords1700000000000], synchronize: false, poolSize: 10 });
  await db.dataSource.runMigrations();
  expect(await claimReturningOf(typeormDatabaseOf(db.dataSource))).toBe(true);
  return { store: new TypeOrmIdempotencyStore(db.dataSource), dispose: () => db.destroy() };
});

describeStoreContract('TypeOrmIdempotencyStore (MySQL 8 statements, mysql driver)', async () => {
  const db = await createMariaDataSource({ type: 'mysql', synchronize: false, poolSize: 10 });
  assumeClaimReturning(db.dataSource, false);
  const store = new TypeOrmIdempotencyStore(db.dataSource);
  await store.ensureTable();
  return { store, dispose: () => db.destroy() };
});

/** The store's purge batch, as TypeORM logs it (MariaDB: with its resume bound and RETURNING). */
const PURGE_BATCH = /^DELETE FROM .* ORDER BY `expires_at` LIMIT \?( RETURNING `expires_at`)?$/;

/** A TypeORM logger that hands every query and its parameters to `onQuery`, and is silent otherwise. */
function queryLogger(onQuery: (query: string, parameters: unknown[] | undefined) => unknown): Logger {
  return {
    logQuery: (query, parameters) => void onQuery(query, parameters as unknown[] | undefined),
    logQueryError: () => undefined,
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
}

describe('TypeOrmIdempotencyStore on MariaDB', () => {
  let db: Awaited<ReturnType<typeof createMariaDataSource>>;
  let dataSource: DataSource;
  const key = () => 'k' + randomUUID().replace(/-/g, '');

  beforeAll(async () => {
    db = await createMariaDataSource({ poolSize: 10, synchronize: false });
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

  it('tells MariaDB 10.5+ (INSERT ... RETURNING) from MySQL by the version string', () => {
    expect(supportsInsertReturning('10.11.19-MariaDB-0+deb12u1')).toBe(true);
    expect(supportsInsertReturning('10.5.0-MariaDB')).toBe(true);
    expect(supportsInsertReturning('5.5.5-10.4.32-MariaDB')).toBe(false);
    expect(supportsInsertReturning('10.4.32-MariaDB-log')).toBe(false);
    expect(supportsInsertReturning('11.4.2-MariaDB')).toBe(true);
    expect(supportsInsertReturning('8.0.36')).toBe(false);
    expect(supportsInsertReturning('8.4.3-standard')).toBe(false);
  });

  it.each([
    ['MariaDB (RETURNING)', true],
    ['MySQL 8 (insert id, then a read)', false],
  ])('%s: one winner among 50 concurrent claims, 49 get its record, round after round', async (_, returning) => {
    const other = await createMariaDataSource({ database: db.database, synchronize: false, poolSize: 10 });
    try {
      assumeClaimReturning(other.dataSource, returning);
      const tableName = uniqueName('records');
      const store = new TypeOrmIdempotencyStore(other.dataSource, { tableName });
      await store.ensureTable();
      for (let round = 0; round < 5; round++) {
        const k = key();
        const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(k, { token: randomUUID(), leaseTtl: 10_000 })));
        const winners = results.filter((r) => r.claimed);
        expect(winners).toHaveLength(1);
        const winnerToken = winners[0].record.status === 'in_progress' && winners[0].record.leaseToken;
        for (const r of results) expect(r.record).toMatchObject({ status: 'in_progress', key: k, leaseToken: winnerToken });
      }
    } finally {
      await other.destroy(false);
    }
  });

  it('takes over a dead lease exactly once when 30 claims race for it', async () => {
    const store = await newStore();
    const k = key();
    await store.claim(k, { token: 'old', leaseTtl: 1 });
    await waitUntil(async () => (await store.get(k)) === undefined, { what: 'the 1 ms lease to expire on the server clock' });
    const results = await Promise.all(Array.from({ length: 30 }, () => store.claim(k, { token: randomUUID(), leaseTtl: 10_000 })));
    const winners = results.filter((r) => r.claimed);
    expect(winners).toHaveLength(1);
    const winnerToken = winners[0].record.status === 'in_progress' && winners[0].record.leaseToken;
    for (const r of results) expect(r.record).toMatchObject({ status: 'in_progress', leaseToken: winnerToken });
  });

  it('answers a replay in one statement that writes nothing (the row keeps its values)', async () => {
    const store = await newStore();
    const k = key();
    await store.claim(k, { token: 't', leaseTtl: 10_000, fingerprint: 'fp' });
    await store.complete(k, 't', { result: 'r', ttl: 60_000 });
    const [before] = await dataSource.query(`SELECT * FROM ${store.tableName} WHERE \`key\` = ?`, [k]);
    const logged: string[] = [];
    const original = dataSource.logger.logQuery;
    dataSource.logger.logQuery = (query: string) => void logged.push(query);
    try {
      const replay = await store.claim(k, { token: 'u', leaseTtl: 10_000, fingerprint: 'fp' });
      expect(replay).toMatchObject({ claimed: false, record: { status: 'completed', result: 'r', fingerprint: 'fp' } });
    } finally {
      dataSource.logger.logQuery = original;
    }
    expect(logged).toHaveLength(1);
    expect(logged[0].startsWith('INSERT INTO')).toBe(true);
    expect(logged[0]).toContain('RETURNING');
    const [after] = await dataSource.query(`SELECT * FROM ${store.tableName} WHERE \`key\` = ?`, [k]);
    expect(after).toEqual(before);
  });

  it('uses the server clock for leases and expiry, stored as epoch ms in BIGINT', async () => {
    const store = await newStore();
    const k = key();
    const now = await mariaNowMs(dataSource);
    const claim = await store.claim(k, { token: 't', leaseTtl: 60_000 });
    const [{ lease, created }] = await dataSource.query(
      `SELECT lease_expires_at AS lease, created_at AS created FROM ${store.tableName} WHERE \`key\` = ?`,
      [k],
    );
    expect(Number(created)).toBeGreaterThanOrEqual(now);
    expect(Number(lease)).toBe(Number(created) + 60_000);
    expect(claim.record.status === 'in_progress' && claim.record.leaseExpiresAt).toBe(Number(lease));
    const [{ DATA_TYPE }] = await dataSource.query(
      `SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'expires_at'`,
      [store.tableName.replace(/`/g, '')],
    );
    expect(DATA_TYPE).toBe('bigint');
  });

  it('keeps keys that differ only in case apart (binary collation)', async () => {
    const store = await newStore();
    const k = key();
    expect((await store.claim(k, { token: 'a', leaseTtl: 10_000 })).claimed).toBe(true);
    expect((await store.claim(k.toUpperCase(), { token: 'b', leaseTtl: 10_000 })).claimed).toBe(true);
  });

  it('counts found rows, not changed rows, also without CLIENT_FOUND_ROWS (an UPDATE to the same values found its row)', async () => {
    const other = await createMariaDataSource({ database: db.database, synchronize: false, poolSize: 2, flags: '-FOUND_ROWS' });
    try {
      const store = new TypeOrmIdempotencyStore(other.dataSource, { tableName: uniqueName('records') });
      await store.ensureTable();
      const k = key();
      await store.claim(k, { token: 't', leaseTtl: 10_000 });
      const same = { sql: `UPDATE ${store.tableName} SET \`status\` = \`status\` WHERE \`key\` = ?`, params: [k], name: undefined };
      const [raw] = await other.dataSource.query(same.sql, same.params).then((r: unknown) => [r]);
      expect((raw as { affectedRows: number }).affectedRows).toBe(0); // what the flag-less connection reports
      expect((await sqlExecutorOf(other.dataSource).run(same)).affected).toBe(1);
      expect(await store.renew(k, 't', 10_000)).toBe(true);
      expect(await store.complete(k, 't', { result: 'r', ttl: 60_000 })).toBe(true);
      expect(await store.complete(k, 't', { result: 'r', ttl: 60_000 })).toBe(false);
    } finally {
      await other.destroy(false);
    }
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
    await waitUntil(async () => (await Promise.all(dead.map((k) => store.get(k)))).every((r) => r === undefined), {
      what: 'the dead records to expire',
    });
    expect(await store.purgeExpired()).toEqual({ ran: true, deleted: dead.length });
    const rows: Array<{ key: string }> = await dataSource.query(`SELECT \`key\` FROM ${store.tableName}`);
    expect(rows.map((r) => r.key).sort()).toEqual([...live].sort());
    expect(await store.purgeExpired()).toEqual({ ran: true, deleted: 0 });
  });

  it('lets only one of two instances purge at a time, through GET_LOCK on a name per table', async () => {
    const tableName = uniqueName('records');
    const other = await createMariaDataSource({ database: db.database, synchronize: false, poolSize: 3 });
    const storeA = new TypeOrmIdempotencyStore(dataSource, { tableName });
    const storeB = new TypeOrmIdempotencyStore(other.dataSource, { tableName });
    await storeA.ensureTable();
    for (let i = 0; i < 20; i++) await storeA.claim(key(), { token: 't', leaseTtl: 1 });
    const now = await mariaNowMs(dataSource);
    await waitUntil(async () => (await mariaNowMs(dataSource)) > now + 1, { what: 'the 20 leases to expire' });
    // Another instance in the middle of its purge holds the table's lock.
    const busy = dataSource.createQueryRunner();
    await busy.connect();
    try {
      const [{ got }] = await busy.query('SELECT GET_LOCK(?, 0) AS got', [purgeLockNameOf(storeA.tableName)]);
      expect(Number(got)).toBe(1);
      expect(await storeB.purgeExpired()).toEqual({ ran: false, deleted: 0 });
      expect(await storeA.purgeExpired()).toEqual({ ran: false, deleted: 0 });
      await busy.query('SELECT RELEASE_LOCK(?)', [purgeLockNameOf(storeA.tableName)]);
      expect(await storeB.purgeExpired()).toEqual({ ran: true, deleted: 20 });
      // Released after the run: the other instance purges next time.
      expect(await storeA.purgeExpired()).toEqual({ ran: true, deleted: 0 });
    } finally {
      await busy.release();
      await other.destroy(false);
    }
  });

  it('starts each purge batch at the latest expiry the last one deleted (DELETE ... RETURNING), past the entries InnoDB has not purged yet', async () => {
    const batches: unknown[][] = [];
    const tableName = uniqueName('records');
    // The records table's batches (the steps table's purge follows them).
    const logger = queryLogger(
      (query, parameters) => PURGE_BATCH.test(query) && query.includes(`\`${tableName}\` WHERE`) && batches.push([...(parameters ?? [])]),
    );
    const logged = await createMariaDataSource({ database: db.database, synchronize: false, poolSize: 2, logger });
    const store = new TypeOrmIdempotencyStore(logged.dataSource, { tableName, purgeBatchSize: 10 });
    try {
      await store.ensureTable();
      // 25 expired rows, one expiry each (1 ms apart), and 3 live ones.
      const now = await mariaNowMs(dataSource);
      const expiries = Array.from({ length: 25 }, (_, i) => now - 60_000 + i);
      for (const [i, expiresAt] of expiries.entries()) {
        await dataSource.query(
          `INSERT INTO \`${tableName}\` (\`key\`, \`status\`, \`result\`, \`expires_at\`, \`created_at\`) VALUES (?, 'completed', 'r', ?, ?)`,
          [`dead-${i}`, expiresAt, expiresAt - 1_000],
        );
      }
      for (let i = 0; i < 3; i++) await store.claim(key(), { token: 't', leaseTtl: 60_000 });
      expect(await store.purgeExpired()).toEqual({ ran: true, deleted: 25 });
      expect(batches).toEqual([
        [0, 10],
        [expiries[9], 10],
        [expiries[19], 10],
      ]);
      const [{ n }] = await dataSource.query(`SELECT COUNT(*) AS n FROM \`${tableName}\``);
      expect(Number(n)).toBe(3);
    } finally {
      await logged.destroy(false);
    }
  });

  it('starts the purge after one whose batch outlived the deadline with batches half as big, and still purges every expired row', async () => {
    const limits: number[] = [];
    const logger = queryLogger((query, parameters) => PURGE_BATCH.test(query) && limits.push(Number(parameters?.at(-1))));
    const logged = await createMariaDataSource({ database: db.database, synchronize: false, poolSize: 4, logger });
    const tableName = uniqueName('records');
    const store = new TypeOrmIdempotencyStore(logged.dataSource, { tableName, purgeBatchSize: 100, statementTimeout: 500 });
    await store.ensureTable();
    const keys = Array.from({ length: 250 }, key);
    for (const k of keys) await store.claim(k, { token: 't', leaseTtl: 1 });
    const now = await mariaNowMs(dataSource);
    await waitUntil(async () => (await mariaNowMs(dataSource)) > now + 1, { what: 'the 250 leases to expire' });
    // Another transaction holds the oldest expired row: the first batch waits on it past the deadline.
    const busy = dataSource.createQueryRunner();
    await busy.connect();
    try {
      await busy.startTransaction();
      await busy.query(`SELECT \`key\` FROM \`${tableName}\` ORDER BY \`expires_at\` LIMIT 1 FOR UPDATE`);
      await expect(store.purgeExpired()).rejects.toThrow();
      expect(limits).toEqual([100]);
      await busy.rollbackTransaction();
      // The abandoned batch may still hold the purge lock until its session ends.
      let deleted = 0;
      await waitUntil(
        async () => {
          const result = await store.purgeExpired();
          deleted += result.deleted;
          return result.ran;
        },
        { what: 'the next purge to run' },
      );
      expect(limits[1]).toBe(50);
      const [{ n }] = await dataSource.query(`SELECT COUNT(*) AS n FROM \`${tableName}\``);
      expect(Number(n)).toBe(0);
      expect(deleted).toBeGreaterThan(0);
    } finally {
      if (busy.isTransactionActive) await busy.rollbackTransaction();
      await busy.release();
      await logged.destroy(false);
    }
  });

  it('creates the same table from the migration as from the entity (synchronize changes nothing but the result column type)', async () => {
    const checked = await createMariaDataSource({
      entities: [IdempotencyRecordEntity],
      migrations: [CreateIdempotencyRecords1700000000000],
      synchronize: false,
      poolSize: 2,
    });
    try {
      await checked.dataSource.runMigrations();
      const pending = await checked.dataSource.driver.createSchemaBuilder().log();
      // The entity declares `text` for every database; the migration makes it MEDIUMTEXT
      // on MySQL (TEXT holds 64 KB, below the default maxResponseBytes).
      expect(pending.upQueries.map((q) => q.query).filter((q) => !/`result`/.test(q))).toEqual([]);
      const runner = checked.dataSource.createQueryRunner();
      try {
        // Running it again is harmless; down() drops the table.
        await new CreateIdempotencyRecords1700000000000().up(runner);
        await new CreateIdempotencyRecords1700000000000().down(runner);
      } finally {
        await runner.release();
      }
      expect(await checked.dataSource.query(`SHOW TABLES LIKE 'idempotency_records'`)).toEqual([]);
    } finally {
      await checked.destroy();
    }
  });

  it('uses a custom table through an entity factory, a migration factory and the entity option', async () => {
    const tableName = uniqueName('custom_records');
    const Entity = createIdempotencyRecordEntity(tableName);
    const Migration = createIdempotencyRecordsMigration(tableName, { timestamp: 1735000000000 });
    const custom = await createMariaDataSource({ entities: [Entity], migrations: [Migration], synchronize: false, poolSize: 2 });
    try {
      const ran = await custom.dataSource.runMigrations();
      expect(ran.map((m) => m.name)).toEqual([`CreateIdempotencyRecords_${tableName}1735000000000`]);
      const store = new TypeOrmIdempotencyStore(custom.dataSource, { entity: Entity });
      expect(store.tableName).toBe(`\`${tableName}\``);
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

  it('verify(): a missing table is a configuration error that names the migration; a table without the columns too', async () => {
    const missing = new TypeOrmIdempotencyStore(dataSource, { tableName: uniqueName('absent') });
    const error = await missing.verify().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as IdempotencyConfigurationError).message).toMatch(/does not exist/);
    expect((error as IdempotencyConfigurationError).hint).toMatch(/CreateIdempotencyTables1700000000000/);
    await expect(missing.claim(key(), { token: 't', leaseTtl: 1_000 })).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(missing.runTransactional({ key: key(), ttl: 1_000 }, async () => ({ value: 1, result: '1' }))).rejects.toBeInstanceOf(
      IdempotencyConfigurationError,
    );

    const foreign = uniqueName('foreign');
    await dataSource.query(`CREATE TABLE \`${foreign}\` (\`key\` varchar(255) PRIMARY KEY, \`status\` varchar(16))`);
    const wrong = new TypeOrmIdempotencyStore(dataSource, { tableName: foreign });
    await expect(wrong.verify()).rejects.toThrow(/lacks a column the store needs/);
    await (await newStore()).verify();
  });

  it('answers ping', async () => {
    const store = await newStore();
    await expect(store.ping()).resolves.toBeUndefined();
  });
});
