import type { RecordDialect } from '../dialect.js';
import { MYSQL_NOW, mysqlQuoted } from './mysql-statements.js';
import type { TableName } from './records-table.js';
import type { Statement } from '../statement.js';

/*
 * The step records of `step()` (docs/steps.md) in SQL: a table of their own beside the
 * records table, `<records table>_steps`, one row per finished step, primary key
 * (key, step). Not rows of the records table: a release or a takeover deletes or rewrites
 * the record's row, and the steps must outlive both. The save is one statement fenced by
 * the lease: it inserts only while the record's row is `in_progress` under the token with
 * its lease unexpired, and reads that row with a share lock, so a takeover committing
 * meanwhile is seen (the recheck finds the new token) instead of an older snapshot.
 */

const PG_NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

/** The steps statements of one records table. */
export interface StepStatements {
  /** The steps table, quoted the dialect's way. */
  readonly quoted: string;
  /** Its DDL (`ensureTable()`, the migration). Idempotent. */
  createTable(): string[];
  /** Drops it (a migration's `down`). */
  dropTable(): string[];
  load(key: string): Statement;
  save(key: string, token: string, step: string, result: string, ttl: number): Statement;
  delete(key: string): Statement;
  /** Deletes up to `limit` expired step rows. */
  purgeBatch(limit: number): Statement;
  /** Selects every column and no row: `verify()`'s check that the schema holds steps. */
  probe(): Statement;
}

/** `<table>_steps` in the records table's schema. */
export function stepsTableOf(records: TableName): TableName {
  const table = `${records.table}_steps`;
  return { schema: records.schema, table, quoted: (records.schema ? `"${records.schema}".` : '') + `"${table}"` };
}

const plain = (sql: string, params: unknown[]): Statement => ({ name: undefined, sql, params });

/** The steps statements of `records` for `dialect` (`clock`: SQLite's, which is the app's). */
export function stepStatements(dialect: RecordDialect, records: TableName, clock: () => number = Date.now): StepStatements {
  const steps = stepsTableOf(records);
  if (dialect === 'mysql') return mysqlSteps(steps, mysqlQuoted(records));
  if (dialect === 'postgres') return postgresSteps(steps, records.quoted);
  return sqliteSteps(steps, records.quoted, clock);
}

function quotedDdl(steps: TableName): string[] {
  return [
    `CREATE TABLE IF NOT EXISTS ${steps.quoted} (
  "key" varchar(255) NOT NULL,
  "step" varchar(64) NOT NULL,
  "result" text NOT NULL,
  "expires_at" bigint NOT NULL,
  CONSTRAINT "pk_${steps.table}" PRIMARY KEY ("key", "step")
)`,
    `CREATE INDEX IF NOT EXISTS "idx_${steps.table}_expires_at" ON ${steps.quoted} ("expires_at")`,
  ];
}

function postgresSteps(steps: TableName, records: string): StepStatements {
  const t = steps.quoted;
  return {
    quoted: t,
    dropTable: () => [`DROP TABLE IF EXISTS ${t}`],
    createTable: () => quotedDdl(steps),
    load: (key) => plain(`SELECT "step", "result" FROM ${t} WHERE "key" = $1 AND "expires_at" > ${PG_NOW}`, [key]),
    save: (key, token, step, result, ttl) =>
      plain(
        `INSERT INTO ${t} ("key", "step", "result", "expires_at")
SELECT $1::varchar, $2::varchar, $3::text, c.now_ms + $5::bigint FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE EXISTS (SELECT 1 FROM ${records} r WHERE r."key" = $1::varchar AND r."lease_token" = $4::varchar
  AND r."status" = 'in_progress' AND r."lease_expires_at" > c.now_ms FOR SHARE OF r)
ON CONFLICT ("key", "step") DO UPDATE SET "result" = EXCLUDED."result", "expires_at" = EXCLUDED."expires_at"`,
        [key, step, result, token, ttl],
      ),
    delete: (key) => plain(`DELETE FROM ${t} WHERE "key" = $1`, [key]),
    purgeBatch: (limit) =>
      plain(`DELETE FROM ${t} WHERE ("key", "step") IN (SELECT "key", "step" FROM ${t} WHERE "expires_at" <= ${PG_NOW} LIMIT $1)`, [limit]),
    probe: () => plain(`SELECT "key", "step", "result", "expires_at" FROM ${t} WHERE 1 = 0`, []),
  };
}

function sqliteSteps(steps: TableName, records: string, clock: () => number): StepStatements {
  const t = steps.quoted;
  return {
    quoted: t,
    dropTable: () => [`DROP TABLE IF EXISTS ${t}`],
    createTable: () => quotedDdl(steps),
    load: (key) => plain(`SELECT "step", "result" FROM ${t} WHERE "key" = ? AND "expires_at" > ?`, [key, clock()]),
    save: (key, token, step, result, ttl) => {
      const now = clock();
      return plain(
        `INSERT INTO ${t} ("key", "step", "result", "expires_at")
SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM ${records} WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?)
ON CONFLICT ("key", "step") DO UPDATE SET "result" = excluded."result", "expires_at" = excluded."expires_at"`,
        [key, step, result, now + ttl, key, token, now],
      );
    },
    delete: (key) => plain(`DELETE FROM ${t} WHERE "key" = ?`, [key]),
    purgeBatch: (limit) =>
      plain(`DELETE FROM ${t} WHERE rowid IN (SELECT rowid FROM ${t} WHERE "expires_at" <= ? LIMIT ?)`, [clock(), limit]),
    probe: () => plain(`SELECT "key", "step", "result", "expires_at" FROM ${t} WHERE 1 = 0`, []),
  };
}

function mysqlSteps(steps: TableName, records: string): StepStatements {
  const t = mysqlQuoted(steps);
  return {
    quoted: t,
    dropTable: () => [`DROP TABLE IF EXISTS ${t}`],
    createTable: () => [
      `CREATE TABLE IF NOT EXISTS ${t} (
  \`key\` varchar(255) NOT NULL,
  \`step\` varchar(64) NOT NULL,
  \`result\` mediumtext NOT NULL,
  \`expires_at\` bigint NOT NULL,
  PRIMARY KEY (\`key\`, \`step\`),
  KEY \`idx_${steps.table}_expires_at\` (\`expires_at\`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
    load: (key) => plain(`SELECT \`step\`, \`result\` FROM ${t} WHERE \`key\` = ? AND \`expires_at\` > ${MYSQL_NOW}`, [key]),
    // INSERT ... SELECT with a share lock on the record's row: a locking read sees the
    // latest commit, where READ COMMITTED would read the source rows without locks.
    save: (key, token, step, result, ttl) =>
      plain(
        `INSERT INTO ${t} (\`key\`, \`step\`, \`result\`, \`expires_at\`)
SELECT \`key\`, ?, ?, ${MYSQL_NOW} + ? FROM ${records}
WHERE \`key\` = ? AND \`lease_token\` = ? AND \`status\` = 'in_progress' AND \`lease_expires_at\` > ${MYSQL_NOW} LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE \`result\` = VALUES(\`result\`), \`expires_at\` = VALUES(\`expires_at\`)`,
        [step, result, ttl, key, token],
      ),
    delete: (key) => plain(`DELETE FROM ${t} WHERE \`key\` = ?`, [key]),
    purgeBatch: (limit) => plain(`DELETE FROM ${t} WHERE \`expires_at\` <= ${MYSQL_NOW} ORDER BY \`expires_at\` LIMIT ?`, [limit]),
    probe: () => plain(`SELECT \`key\`, \`step\`, \`result\`, \`expires_at\` FROM ${t} WHERE 1 = 0`, []),
  };
}
