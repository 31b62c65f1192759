import { createHash } from 'node:crypto';
import { IdempotencyInFlightError } from '../../core/errors.js';
import type { SqlDialect } from '../dialect.js';
import { sqlStateOf } from '../failures.js';
import type { SqlConnection } from '../port.js';
import { plain } from '../statement.js';
import { acquireByInsert, type GuardStatement, type InsertAcquireStatements } from './insert-acquire.js';
import { flaggedClaimAnswer } from './record-row.js';
import { probeSql, quotedRecordsTableDdl, RECORD_COLUMNS, type TableName } from './records-table.js';

/**
 * PostgreSQL. Expiry reads the database clock, so that every app host agrees on it
 * whatever its own clock says. The store's statements are named prepared statements
 * (unless `preparedStatements: false`), the claim answers in one round trip, and the
 * transaction bounds its waits with `lock_timeout`.
 */
const PG_NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

type StatementKind = keyof InsertAcquireStatements;

/**
 * `prepared`: each kind of statement gets a prepared-statement name derived from its
 * text (which depends on the table only), so the server parses and plans it once per
 * connection instead of on every call; without, every statement is sent unnamed (for
 * poolers that cannot keep prepared statements). Measured gain: docs/performance.md,
 * "TypeORM store on PostgreSQL: prepared statements on the pool".
 */
export function postgresDialect(table: TableName, prepared = true): SqlDialect {
  const texts = postgresStatementTexts(table.quoted);
  const names = {} as Record<StatementKind, string | undefined>;
  for (const [kind, text] of Object.entries(texts) as Array<[StatementKind, string]>) {
    names[kind] = prepared && kind !== 'probe' ? `nestjs_idem_${createHash('sha1').update(text).digest('hex').slice(0, 24)}` : undefined;
  }
  const statements: InsertAcquireStatements = {
    claim: (key, token, leaseTtl, fingerprint) => ({
      name: names.claim,
      sql: texts.claim,
      params: [key, token, leaseTtl, fingerprint ?? null],
    }),
    read: (key) => ({ name: names.read, sql: texts.read, params: [key] }),
    complete: (key, token, result, ttl) => ({ name: names.complete, sql: texts.complete, params: [key, token, result, ttl] }),
    release: (key, token) => ({ name: names.release, sql: texts.release, params: [key, token] }),
    renew: (key, token, leaseTtl) => ({ name: names.renew, sql: texts.renew, params: [key, token, leaseTtl] }),
    delete: (key) => ({ name: names.delete, sql: texts.delete, params: [key] }),
    insertIfAbsent: (key, token, ttl, fingerprint) => ({
      name: names.insertIfAbsent,
      sql: texts.insertIfAbsent,
      params: [key, token, ttl, fingerprint ?? null],
    }),
    readAny: (key) => ({ name: names.readAny, sql: texts.readAny, params: [key] }),
    takeOver: (key, token, ttl, fingerprint) => ({
      name: names.takeOver,
      sql: texts.takeOver,
      params: [key, token, ttl, fingerprint ?? null],
    }),
    finish: (key, result, ttl) => ({ name: names.finish, sql: texts.finish, params: [key, result, ttl] }),
    purgeBatch: (limit) => ({ name: names.purgeBatch, sql: texts.purgeBatch, params: [limit] }),
    probe: () => ({ name: undefined, sql: texts.probe, params: [] }),
  };
  const lockKey = purgeLockKeyOf(table.quoted);
  return {
    ...statements,
    name: 'postgres',
    table,
    createTable: () => quotedRecordsTableDdl(table),
    // A concurrent claimer committed between the statement's snapshot and its conflict check: look again.
    claimAnswer: (key, _request, result) => flaggedClaimAnswer(key, result, 'again'),
    claimMayRetry: () => false,
    withPurgeLock: (db, purge) =>
      db.withConnection(async (connection) => {
        const { rows } = await connection.run(plain('SELECT pg_try_advisory_lock($1::bigint) AS locked', [lockKey]));
        if (rows[0]?.locked !== true) return { ran: false, deleted: 0 };
        try {
          return { ran: true, deleted: await purge(connection) };
        } finally {
          await connection.run(plain('SELECT pg_advisory_unlock($1::bigint)', [lockKey]));
        }
      }),
    isolationOf: (requested) => requested ?? 'READ COMMITTED',
    acquire: (step) => acquireByInsert(statements, guardRecordStatement, step),
  };
}

/** The text of every statement on table `t` (quoted): constant per table, so built once. */
function postgresStatementTexts(t: string): Record<StatementKind, string> {
  return {
    // One round trip. A live row visible in the statement's snapshot is returned as is,
    // and the INSERT then gets no input row: a duplicate's claim takes no row lock and no
    // transaction id, so it costs no WAL flush. Otherwise the upsert inserts, or takes a
    // dead row over. When a concurrent claimer committed after this statement's snapshot
    // but before its conflict check, neither branch returns a row; the caller then runs
    // the statement again (see TypeOrmIdempotencyStore.claim).
    claim: `WITH clock AS (SELECT ${PG_NOW} AS now_ms),
live AS (
  SELECT ${RECORD_COLUMNS} FROM ${t}, clock WHERE "key" = $1::varchar AND "expires_at" > clock.now_ms
),
claimed AS (
  INSERT INTO ${t} AS t ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
  SELECT $1::varchar, 'in_progress', $2::varchar, now_ms + $3::bigint, $4::varchar, NULL, now_ms + $3::bigint, now_ms FROM clock
  WHERE NOT EXISTS (SELECT 1 FROM live)
  ON CONFLICT ("key") DO UPDATE SET
    "status" = 'in_progress', "lease_token" = EXCLUDED."lease_token", "lease_expires_at" = EXCLUDED."lease_expires_at",
    "fingerprint" = EXCLUDED."fingerprint", "result" = NULL, "expires_at" = EXCLUDED."expires_at", "created_at" = EXCLUDED."created_at"
  WHERE t."expires_at" <= EXCLUDED."created_at"
  RETURNING t."status", t."lease_token", t."lease_expires_at", t."fingerprint", t."result", t."expires_at", true AS claimed
)
SELECT * FROM claimed
UNION ALL
SELECT *, false FROM live`,
    read: `SELECT ${RECORD_COLUMNS} FROM ${t} WHERE "key" = $1 AND "expires_at" > ${PG_NOW}`,
    complete: `UPDATE ${t} SET "status" = 'completed', "result" = $3, "expires_at" = c.now_ms + $4::bigint, "lease_token" = NULL, "lease_expires_at" = NULL
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress' AND "lease_expires_at" > c.now_ms`,
    release: `DELETE FROM ${t} WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress'`,
    renew: `UPDATE ${t} SET "lease_expires_at" = c.now_ms + $3::bigint, "expires_at" = c.now_ms + $3::bigint
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress' AND "lease_expires_at" > c.now_ms`,
    delete: `DELETE FROM ${t} WHERE "key" = $1`,
    insertIfAbsent: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
SELECT $1::varchar, 'in_progress', $2::varchar, now_ms + $3::bigint, $4::varchar, NULL, now_ms + $3::bigint, now_ms FROM (SELECT ${PG_NOW} AS now_ms) c
ON CONFLICT ("key") DO NOTHING
RETURNING "key"`,
    readAny: `SELECT ${RECORD_COLUMNS}, ("expires_at" <= ${PG_NOW}) AS dead FROM ${t} WHERE "key" = $1`,
    takeOver: `UPDATE ${t} SET "status" = 'in_progress', "lease_token" = $2, "lease_expires_at" = c.now_ms + $3::bigint, "fingerprint" = $4,
  "result" = NULL, "expires_at" = c.now_ms + $3::bigint, "created_at" = c.now_ms
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "expires_at" <= c.now_ms
RETURNING "key"`,
    finish: `UPDATE ${t} SET "status" = 'completed', "result" = $2, "expires_at" = c.now_ms + $3::bigint, "lease_token" = NULL, "lease_expires_at" = NULL
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1`,
    // SKIP LOCKED: a row being taken over right now is left alone instead of waited for.
    // = ANY(ARRAY(...)), not IN (...): the batch is a named prepared statement, and after
    // five runs PostgreSQL may keep a generic plan, which does not know LIMIT $1 and reads
    // IN (...) as a hash semi-join over a scan of the whole table (measured at 400 000 rows:
    // 64 ms per batch of 1000). ARRAY(...) is an InitPlan whatever the plan: the batch's keys
    // first, then one primary-key lookup each (4 ms).
    purgeBatch: `DELETE FROM ${t} WHERE "key" = ANY(ARRAY(
  SELECT "key" FROM ${t} WHERE "expires_at" <= ${PG_NOW} ORDER BY "expires_at" LIMIT $1 FOR UPDATE SKIP LOCKED
))`,
    probe: probeSql(t),
  };
}

/**
 * Runs one record statement of the acquisition: bounds its wait on the unique index or
 * row lock (`lock_timeout`, transaction-local) and maps a serialization failure (stricter
 * isolation levels) to a restart.
 */
const guardRecordStatement: GuardStatement = async (step, fn) => {
  const { connection, waitTimeout, nested } = step;
  // A savepoint keeps a failed insert from aborting the caller's outer transaction, and
  // rolling back to it also reverts the lock_timeout set after it.
  if (nested) await connection.run(plain('SAVEPOINT nestjs_idempotency_acquire'));
  try {
    let previous: string | undefined;
    if (waitTimeout !== undefined) previous = await setLockTimeout(connection, waitTimeout);
    const result = await fn();
    if (previous !== undefined) await connection.run(plain(`SELECT set_config('lock_timeout', $1, true)`, [previous]));
    if (nested) await connection.run(plain('RELEASE SAVEPOINT nestjs_idempotency_acquire'));
    return result;
  } catch (error) {
    if (nested) await connection.run(plain('ROLLBACK TO SAVEPOINT nestjs_idempotency_acquire'));
    const code = sqlStateOf(error);
    if (code === '55P03') throw new IdempotencyInFlightError(waitTimeout ?? 1_000);
    if ((code === '40001' || code === '40P01') && !nested) return 'restart';
    throw error;
  }
};

/** Sets the transaction's `lock_timeout` to `waitTimeout` ms; returns the previous one. */
async function setLockTimeout(connection: SqlConnection, waitTimeout: number): Promise<string> {
  const { rows } = await connection.run(
    plain(`SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $1, true)`, [
      `${Math.max(1, Math.ceil(waitTimeout))}ms`,
    ]),
  );
  return String(rows[0].previous);
}

/** A stable 64-bit advisory lock key per table (the same on every instance). */
function purgeLockKeyOf(table: string): string {
  return createHash('sha256')
    .update('nestjs-idempotency:purge:' + table)
    .digest()
    .readBigInt64BE(0)
    .toString();
}
