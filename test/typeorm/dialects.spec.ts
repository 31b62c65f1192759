import 'reflect-metadata';
import type { DataSource } from 'typeorm';
import { IdempotencyFingerprintMismatchError } from '../../lib/core/errors.js';
import type { ClaimResult } from '../../lib/core/record.js';
import type { TransactionalRequest } from '../../lib/core/store.js';
import { mysqlDialect } from '../../lib/sql/dialects/mysql.js';
import { postgresDialect } from '../../lib/sql/dialects/postgres.js';
import { toRecord } from '../../lib/sql/dialects/record-row.js';
import { parseTableName } from '../../lib/sql/dialects/records-table.js';
import type { SqlDialect } from '../../lib/sql/dialect.js';
import { sqliteDialect } from '../../lib/sql/dialects/sqlite.js';
import type { Statement } from '../../lib/sql/statement.js';
import { typeormDatabaseOf } from '../../lib/typeorm/store/database.js';
import { sqlExecutorOf, type SqlResult } from '../../lib/typeorm/store/sql-executor.js';
import { createMariaDataSource } from './mariadb/support.js';
import { createPgDataSource, createSqljsDataSource } from './support.js';

// Unit specs of each dialect's statements (lib/typeorm/store/dialects/), run on the real
// servers: PostgreSQL, MariaDB (with the MariaDB claim, which ends in RETURNING, and the
// MySQL 8 one, which answers through the insert id) and SQLite through sql.js. No store
// here: each statement is built by the dialect, sent as the store sends it, and its answer
// read by the dialect.

interface Target {
  readonly dataSource: DataSource;
  readonly dialect: SqlDialect;
  destroy(): Promise<void>;
}

const TABLE = 'dialect_records';

const targets: Array<[string, () => Promise<Target>]> = [
  [
    'postgres (prepared statements)',
    async () => {
      const db = await createPgDataSource();
      return { dataSource: db.dataSource, dialect: postgresDialect(parseTableName(TABLE, db.schema), true), destroy: () => db.destroy() };
    },
  ],
  [
    'postgres (unprepared)',
    async () => {
      const db = await createPgDataSource();
      return { dataSource: db.dataSource, dialect: postgresDialect(parseTableName(TABLE, db.schema), false), destroy: () => db.destroy() };
    },
  ],
  [
    'mysql on MariaDB (claim with RETURNING)',
    async () => {
      const db = await createMariaDataSource();
      const dialect = await mysqlDialect(parseTableName(TABLE)).forServer!(typeormDatabaseOf(db.dataSource));
      return { dataSource: db.dataSource, dialect, destroy: () => db.destroy() };
    },
  ],
  [
    'mysql with the MySQL 8 claim (insert id, then read)',
    async () => {
      const db = await createMariaDataSource();
      return { dataSource: db.dataSource, dialect: mysqlDialect(parseTableName(TABLE)), destroy: () => db.destroy() };
    },
  ],
  [
    'sqlite (sql.js)',
    async () => {
      const dataSource = await createSqljsDataSource();
      return { dataSource, dialect: sqliteDialect(parseTableName(TABLE)), destroy: () => dataSource.destroy() };
    },
  ],
];

describe.each(targets)('SQL dialect: %s', (_name, create) => {
  let target: Target;
  let dialect: SqlDialect;
  let counter = 0;
  const key = () => `key-${++counter}`;

  const run = (statement: Statement): Promise<SqlResult> => sqlExecutorOf(target.dataSource).run(statement);

  /** One claim as the store reads it: the dialect's answer, and the read it may ask for. */
  async function claim(k: string, token: string, leaseTtl: number, fingerprint?: string): Promise<ClaimResult | 'again'> {
    let answer = dialect.claimAnswer(k, { token, leaseTtl, fingerprint }, await run(dialect.claim(k, token, leaseTtl, fingerprint)));
    if (typeof answer === 'object' && 'followUp' in answer) answer = answer.answer(await run(answer.followUp));
    if (answer !== 'read') return answer;
    const { rows } = await run(dialect.read(k));
    return rows.length > 0 ? { claimed: false, record: toRecord(k, rows[0]) } : 'again';
  }

  async function stored(k: string) {
    const { rows } = await run(dialect.readAny(k));
    return rows[0];
  }

  beforeAll(async () => {
    target = await create();
    dialect = target.dialect;
    for (const statement of dialect.createTable()) await target.dataSource.query(statement);
    await run(dialect.probe());
  });

  afterAll(async () => {
    await target?.destroy();
  });

  it('claims an absent key: a lease with its token, fingerprint and expiry', async () => {
    const k = key();
    const result = await claim(k, 'token-a', 60_000, 'fp-1');
    expect(result).toMatchObject({ claimed: true, record: { status: 'in_progress', key: k, leaseToken: 'token-a', fingerprint: 'fp-1' } });
    const record = (result as ClaimResult).record as { leaseExpiresAt: number };
    expect(record.leaseExpiresAt).toBeGreaterThan(Date.now() + 50_000);
    expect(record.leaseExpiresAt).toBeLessThan(Date.now() + 70_000);
    expect(await stored(k)).toMatchObject({ status: 'in_progress', lease_token: 'token-a' });
  });

  it('leaves a live lease to its owner and answers it', async () => {
    const k = key();
    await claim(k, 'owner', 60_000);
    const result = await claim(k, 'intruder', 60_000);
    expect(result).toMatchObject({ claimed: false, record: { status: 'in_progress', leaseToken: 'owner' } });
    expect(await stored(k)).toMatchObject({ lease_token: 'owner' });
  });

  it('takes an expired lease over', async () => {
    const k = key();
    await claim(k, 'dead', -1_000, 'fp-old');
    expect(await stored(k)).toMatchObject({ lease_token: 'dead' });
    const result = await claim(k, 'fresh', 60_000, 'fp-new');
    expect(result).toMatchObject({ claimed: true, record: { status: 'in_progress', leaseToken: 'fresh', fingerprint: 'fp-new' } });
    expect(await stored(k)).toMatchObject({ lease_token: 'fresh', fingerprint: 'fp-new' });
  });

  it('answers a completed record without touching it, and takes it over once its retention ended', async () => {
    const k = key();
    await claim(k, 'first', 60_000, 'fp');
    expect((await run(dialect.complete(k, 'first', '{"done":1}', 60_000))).affected).toBe(1);
    const duplicate = await claim(k, 'second', 60_000, 'fp');
    expect(duplicate).toMatchObject({ claimed: false, record: { status: 'completed', result: '{"done":1}', fingerprint: 'fp' } });

    const expired = key();
    await claim(expired, 'first', 60_000);
    expect((await run(dialect.complete(expired, 'first', '{"done":2}', -1_000))).affected).toBe(1);
    expect((await run(dialect.read(expired))).rows).toHaveLength(0);
    expect(await claim(expired, 'again', 60_000)).toMatchObject({ claimed: true, record: { leaseToken: 'again' } });
  });

  it('completes by compare-and-set on the token, once, and only while the lease lives', async () => {
    const k = key();
    await claim(k, 'owner', 60_000);
    expect((await run(dialect.complete(k, 'not-the-owner', '{}', 60_000))).affected).toBe(0);
    expect(await stored(k)).toMatchObject({ status: 'in_progress' });
    expect((await run(dialect.complete(k, 'owner', '{"ok":true}', 60_000))).affected).toBe(1);
    expect(await stored(k)).toMatchObject({ status: 'completed', result: '{"ok":true}', lease_token: null });
    expect((await run(dialect.complete(k, 'owner', '{"again":true}', 60_000))).affected).toBe(0);

    const lost = key();
    await claim(lost, 'late', -1_000);
    expect((await run(dialect.complete(lost, 'late', '{}', 60_000))).affected).toBe(0);
  });

  it('releases by compare-and-set on the token, and never a completed record', async () => {
    const k = key();
    await claim(k, 'owner', 60_000);
    expect((await run(dialect.release(k, 'other'))).affected).toBe(0);
    expect((await run(dialect.release(k, 'owner'))).affected).toBe(1);
    expect(await stored(k)).toBeUndefined();

    const done = key();
    await claim(done, 'owner', 60_000);
    await run(dialect.complete(done, 'owner', '{}', 60_000));
    expect((await run(dialect.release(done, 'owner'))).affected).toBe(0);
    expect(await stored(done)).toMatchObject({ status: 'completed' });
  });

  it('renews by compare-and-set on the token, only a live lease', async () => {
    const k = key();
    await claim(k, 'owner', 1_000);
    const before = Number((await stored(k)).lease_expires_at);
    expect((await run(dialect.renew(k, 'other', 60_000))).affected).toBe(0);
    expect((await run(dialect.renew(k, 'owner', 60_000))).affected).toBe(1);
    const after = await stored(k);
    expect(Number(after.lease_expires_at)).toBeGreaterThan(before + 50_000);
    expect(Number(after.expires_at)).toBe(Number(after.lease_expires_at));

    const expired = key();
    await claim(expired, 'owner', -1_000);
    expect((await run(dialect.renew(expired, 'owner', 60_000))).affected).toBe(0);
  });

  it('reads only live rows; readAny tells a dead one; delete removes either', async () => {
    const live = key();
    const dead = key();
    await claim(live, 'a', 60_000);
    await claim(dead, 'b', -1_000);
    expect((await run(dialect.read(live))).rows).toHaveLength(1);
    expect((await run(dialect.read(dead))).rows).toHaveLength(0);
    const deadRow = await stored(dead);
    expect(deadRow.dead === true || Number(deadRow.dead) === 1).toBe(true);
    const liveRow = await stored(live);
    expect(liveRow.dead === false || Number(liveRow.dead) === 0).toBe(true);
    expect((await run(dialect.delete(dead))).affected).toBe(1);
    expect(await stored(dead)).toBeUndefined();
  });

  it('purges dead rows in batches and leaves live ones', async () => {
    const live = key();
    await claim(live, 'a', 60_000);
    const dead = [key(), key(), key()];
    for (const k of dead) await claim(k, 'b', -1_000);
    let deleted = 0;
    for (let batch = 0; batch < 10; batch++) {
      const { affected } = await run(dialect.purgeBatch(2));
      deleted += affected;
      if (affected < 2) break;
    }
    expect(deleted).toBeGreaterThanOrEqual(dead.length);
    for (const k of dead) expect(await stored(k)).toBeUndefined();
    expect(await stored(live)).toBeDefined();
  });

  it('finish turns a lease into the completed record whatever its token (the transaction owns its row)', async () => {
    const k = key();
    await claim(k, 'owner', 60_000);
    expect((await run(dialect.finish(k, '{"tx":1}', 60_000))).affected).toBe(1);
    expect(await stored(k)).toMatchObject({ status: 'completed', result: '{"tx":1}', lease_token: null, lease_expires_at: null });
  });

  /** The transaction's acquisition step, in a transaction rolled back afterwards. */
  async function acquire(request: TransactionalRequest) {
    const runner = target.dataSource.createQueryRunner();
    await runner.connect();
    const isolation = dialect.isolationOf(undefined);
    if (isolation) await runner.startTransaction(isolation);
    else await runner.startTransaction();
    try {
      const executor = sqlExecutorOf(target.dataSource);
      const connection = { run: (statement: Statement) => executor.runOn(runner, statement) };
      return await dialect.acquire({ connection, request, waitTimeout: undefined, nested: false });
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }
  }

  it('acquires inside a transaction: owned when absent or dead, a replay when completed, in flight when leased', async () => {
    const absent = key();
    expect(await acquire({ key: absent, ttl: 60_000, fingerprint: undefined })).toEqual({ kind: 'owned' });
    expect(await stored(absent)).toBeUndefined(); // rolled back

    const dead = key();
    await claim(dead, 'dead', -1_000);
    expect(await acquire({ key: dead, ttl: 60_000, fingerprint: undefined })).toEqual({ kind: 'owned' });

    const done = key();
    await claim(done, 'owner', 60_000, 'fp');
    await run(dialect.complete(done, 'owner', '{"r":1}', 60_000));
    expect(await acquire({ key: done, ttl: 60_000, fingerprint: 'fp' })).toEqual({ kind: 'replay', result: '{"r":1}' });
    await expect(acquire({ key: done, ttl: 60_000, fingerprint: 'other' })).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);

    const leased = key();
    await claim(leased, 'owner', 60_000);
    const inFlight = await acquire({ key: leased, ttl: 60_000, fingerprint: undefined });
    expect(inFlight).toMatchObject({ kind: 'in_flight' });
    expect((inFlight as { retryAfterMs: number }).retryAfterMs).toBeGreaterThan(50_000);
  });
});

describe('SQL dialects: what differs besides the statements', () => {
  const table = parseTableName(TABLE);
  const deadlock = Object.assign(new Error('Deadlock found when trying to get lock'), { errno: 1213 });
  const lockWait = Object.assign(new Error('Lock wait timeout exceeded'), { errno: 1205 });

  it('only the MySQL family runs a claim statement or a whole transaction again after InnoDB rolled it back', () => {
    const mysql = mysqlDialect(table);
    expect(mysql.claimMayRetry(deadlock)).toBe(true);
    expect(mysql.claimMayRetry(lockWait)).toBe(true);
    expect(mysql.claimMayRetry(new Error('other'))).toBe(false);
    expect(mysql.retriedTransaction!(deadlock)).toBe('InnoDB deadlock (1213)');
    expect(mysql.retriedTransaction!(lockWait)).toBe('InnoDB lock wait timeout (1205)');
    expect(mysql.retriedTransaction!(new Error('other'))).toBeUndefined();
    for (const other of [postgresDialect(table), sqliteDialect(table)]) {
      expect(other.claimMayRetry(deadlock)).toBe(false);
      expect(other.retriedTransaction).toBeUndefined();
    }
  });

  it('isolation: READ COMMITTED by default on PostgreSQL, the server default on MySQL, none on SQLite', () => {
    expect(postgresDialect(table).isolationOf(undefined)).toBe('READ COMMITTED');
    expect(postgresDialect(table).isolationOf('SERIALIZABLE')).toBe('SERIALIZABLE');
    expect(mysqlDialect(table).isolationOf(undefined)).toBeUndefined();
    expect(mysqlDialect(table).isolationOf('READ COMMITTED')).toBe('READ COMMITTED');
    expect(sqliteDialect(table).isolationOf('SERIALIZABLE')).toBeUndefined();
  });

  it('PostgreSQL names its statements after their text (prepared), unless told not to; the others never do', () => {
    const prepared = postgresDialect(table, true);
    expect(prepared.claim('k', 't', 1, undefined).name).toMatch(/^nestjs_idem_[0-9a-f]{24}$/);
    expect(prepared.probe().name).toBeUndefined();
    expect(postgresDialect(table, true).claim('k', 't', 1, undefined).name).toBe(prepared.claim('k', 't', 1, undefined).name);
    expect(postgresDialect(table, false).claim('k', 't', 1, undefined).name).toBeUndefined();
    expect(mysqlDialect(table).claim('k', 't', 1, undefined).name).toBeUndefined();
    expect(sqliteDialect(table).claim('k', 't', 1, undefined).name).toBeUndefined();
  });

  it('the MySQL family quotes with backticks, the others with double quotes', () => {
    expect(mysqlDialect(parseTableName('billing.records')).table.quoted).toBe('`billing`.`records`');
    expect(postgresDialect(parseTableName('billing.records')).table.quoted).toBe('"billing"."records"');
    expect(sqliteDialect(table).table.quoted).toBe(`"${TABLE}"`);
  });
});
