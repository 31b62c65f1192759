import { createHash } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { driverFamilyOf, driverTypeOf } from '../dialect.js';
import { claimReturningOf, mysqlQuoted, mysqlRecordSql, mysqlRecordsTableDdl } from './mysql-sql.js';

/** The SQL families the record store speaks. */
export type RecordDialect = 'postgres' | 'sqlite' | 'mysql';

export const DEFAULT_RECORDS_TABLE = 'idempotency_records';

/** The record store's dialect of a DataSource; refuses every driver the store does not speak. */
export function dialectOf(dataSource: DataSource): RecordDialect {
  const family = driverFamilyOf(dataSource);
  if (family === 'postgres' || family === 'sqlite' || family === 'mysql') return family;
  const type = driverTypeOf(dataSource);
  throw new IdempotencyConfigurationError(
    `The TypeORM idempotency store does not support the '${type}' driver.`,
    "Use a DataSource of type 'postgres', 'mysql' or 'mariadb' (shared, multi-instance) or a SQLite driver such as 'sqljs' or 'better-sqlite3' (embedded, one process); for other databases use the Redis store.",
  );
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** A validated, possibly schema-qualified table name. */
export interface TableName {
  readonly schema: string | undefined;
  readonly table: string;
  /** `"schema"."table"` or `"table"` (backticks on MySQL and MariaDB), safe to embed in SQL. */
  readonly quoted: string;
}

/**
 * Parses `table` or `schema.table`. Only plain identifiers are accepted, because the
 * name is embedded in SQL text (it cannot be a bind parameter).
 */
export function parseTableName(name: string, defaultSchema?: string): TableName {
  const parts = name.split('.');
  if (parts.length > 2 || !parts.every((part) => IDENTIFIER.test(part))) {
    throw new IdempotencyConfigurationError(
      `Invalid idempotency table name '${name}'.`,
      "Use 'table' or 'schema.table' made of letters, digits, '_' and '$' (at most 63 characters each, not starting with a digit).",
    );
  }
  const [schema, table] = parts.length === 2 ? [parts[0], parts[1]] : [defaultSchema, parts[0]];
  if (schema !== undefined && !IDENTIFIER.test(schema)) {
    throw new IdempotencyConfigurationError(`Invalid schema name '${schema}'.`, "Use letters, digits, '_' and '$'.");
  }
  const quoted = (schema ? `"${schema}".` : '') + `"${table}"`;
  return { schema, table, quoted };
}

/** Name of the primary key constraint, shared by the entity, the migration and `ensureTable()`. */
export const primaryKeyNameOf = (table: string) => `pk_${table}`;
/** Name of the index purge and claim use, shared by the entity, the migration and `ensureTable()`. */
export const expiryIndexNameOf = (table: string) => `idx_${table}_expires_at`;

/**
 * The DDL of the records table: one text for PostgreSQL and SQLite, another for MySQL and
 * MariaDB (`dialect: 'mysql'`). Idempotent (`IF NOT EXISTS`), so `ensureTable()` and the
 * migration can both run it safely.
 */
export function recordsTableDdl(name: TableName, dialect: 'postgres' | 'sqlite' | 'mysql' = 'postgres'): string[] {
  if (dialect === 'mysql') return mysqlRecordsTableDdl(name, primaryKeyNameOf(name.table), expiryIndexNameOf(name.table));
  return [
    `CREATE TABLE IF NOT EXISTS ${name.quoted} (
  "key" varchar(255) NOT NULL,
  "status" varchar(16) NOT NULL,
  "lease_token" varchar(255),
  "lease_expires_at" bigint,
  "fingerprint" varchar(255),
  "result" text,
  "expires_at" bigint NOT NULL,
  "created_at" bigint NOT NULL,
  CONSTRAINT "${primaryKeyNameOf(name.table)}" PRIMARY KEY ("key")
)`,
    `CREATE INDEX IF NOT EXISTS "${expiryIndexNameOf(name.table)}" ON ${name.quoted} ("expires_at")`,
  ];
}

export function dropRecordsTableDdl(name: TableName, dialect: RecordDialect): string[] {
  // MySQL's indexes belong to their table, and DROP INDEX there needs the table's name.
  if (dialect === 'mysql') return [`DROP TABLE IF EXISTS ${mysqlQuoted(name)}`];
  return [
    `DROP INDEX IF EXISTS ${name.schema ? `"${name.schema}".` : ''}"${expiryIndexNameOf(name.table)}"`,
    `DROP TABLE IF EXISTS ${name.quoted}`,
  ];
}

/** One statement and its positional parameters. */
export interface Statement {
  readonly sql: string;
  readonly params: unknown[];
  /**
   * Prepared-statement name (PostgreSQL through node-postgres): the server parses and
   * plans the statement once per connection instead of on every call. Every builder sets
   * it, `undefined` for a statement sent unprepared.
   */
  readonly name: string | undefined;
}

/** Columns every record read returns, in this order. */
const RECORD_COLUMNS = `"status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at"`;

/**
 * The record operations as SQL. PostgreSQL reads the database clock so that every app
 * host agrees on expiry whatever its own clock says; SQLite is embedded in one process,
 * so the app clock is the database clock there and is passed as a parameter.
 *
 * The row's `expires_at` is the instant it stops counting, whatever its state: the lease
 * end while `in_progress` (equal to `lease_expires_at`), the retention end once
 * `completed`. Claim, read and purge therefore test one indexed column.
 */
export interface RecordSql {
  readonly dialect: RecordDialect;
  readonly table: TableName;
  /**
   * MySQL family: the claim returns the row it leaves (MariaDB's `INSERT ... RETURNING`);
   * false on MySQL 8, where a claim shows only in the insert id and a duplicate is read
   * with `read`. Always true elsewhere.
   */
  readonly claimReturning: boolean;
  /**
   * Inserts a lease, or takes over a dead row. Returns the record row with `claimed`
   * true when this call owns it; on PostgreSQL the same statement returns the live
   * existing row (claimed false) when it did not. An empty result means "look again".
   */
  claim(key: string, token: string, leaseTtl: number, fingerprint: string | undefined): Statement;
  /** The live row, if any. */
  read(key: string): Statement;
  complete(key: string, token: string, result: string, ttl: number): Statement;
  release(key: string, token: string): Statement;
  renew(key: string, token: string, leaseTtl: number): Statement;
  delete(key: string): Statement;
  /**
   * Transactional path: inserts a lease row, or nothing when the key exists (waits for an
   * uncommitted duplicate). PostgreSQL and SQLite; the MySQL family acquires with `claim`.
   */
  insertIfAbsent?(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
  /** Transactional path: the row whatever its state, with `dead` telling whether it expired. */
  readAny(key: string): Statement;
  /** Transactional path: takes a dead row over (locks it until commit). PostgreSQL and SQLite. */
  takeOver?(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
  /** Transactional path: turns the (own, uncommitted) lease into the completed record. */
  finish(key: string, result: string, ttl: number): Statement;
  /** Deletes up to `limit` dead rows. */
  purgeBatch(limit: number): Statement;
  /** Selects every column the store needs and no row: `verify()`'s check of the table. */
  probe(): Statement;
}

const PG_NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

type StatementKind = Exclude<keyof RecordSql, 'dialect' | 'table' | 'claimReturning'>;

/**
 * `prepared`: each kind of statement gets a prepared-statement name derived from its
 * text (which depends on the table only), so the server parses and plans it once per
 * connection instead of on every call; without, every statement is sent unnamed (for
 * poolers that cannot keep prepared statements). Measured gain: docs/performance.md,
 * "TypeORM store on PostgreSQL: prepared statements on the pool".
 */
export function postgresRecordSql(table: TableName, prepared = true): RecordSql {
  const texts = postgresStatementTexts(table.quoted);
  const names = {} as Record<StatementKind, string | undefined>;
  for (const [kind, text] of Object.entries(texts) as Array<[StatementKind, string]>) {
    names[kind] = prepared ? `nestjs_idem_${createHash('sha1').update(text).digest('hex').slice(0, 24)}` : undefined;
  }
  return {
    dialect: 'postgres',
    table,
    claimReturning: true,
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
    purgeBatch: `DELETE FROM ${t} WHERE "key" IN (
  SELECT "key" FROM ${t} WHERE "expires_at" <= ${PG_NOW} ORDER BY "expires_at" LIMIT $1 FOR UPDATE SKIP LOCKED
)`,
    probe: probeSql(t),
  };
}

export function sqliteRecordSql(table: TableName, clock: () => number = Date.now): RecordSql {
  const t = table.quoted;
  return {
    dialect: 'sqlite',
    table,
    claimReturning: true,
    claim: (key, token, leaseTtl, fingerprint) => {
      const now = clock();
      // SQLite returns nothing when the conditional update does not fire; the store
      // then reads the live row (sql.js runs one statement at a time, so no lock is needed).
      return {
        name: undefined,
        sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
VALUES (?, 'in_progress', ?, ?, ?, NULL, ?, ?)
ON CONFLICT ("key") DO UPDATE SET
  "status" = 'in_progress', "lease_token" = excluded."lease_token", "lease_expires_at" = excluded."lease_expires_at",
  "fingerprint" = excluded."fingerprint", "result" = NULL, "expires_at" = excluded."expires_at", "created_at" = excluded."created_at"
WHERE "expires_at" <= excluded."created_at"
RETURNING ${RECORD_COLUMNS}, 1 AS claimed`,
        params: [key, token, now + leaseTtl, fingerprint ?? null, now + leaseTtl, now],
      };
    },
    read: (key) => ({
      name: undefined,
      sql: `SELECT ${RECORD_COLUMNS} FROM ${t} WHERE "key" = ? AND "expires_at" > ?`,
      params: [key, clock()],
    }),
    complete: (key, token, result, ttl) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [result, now + ttl, key, token, now],
      };
    },
    release: (key, token) => ({
      name: undefined,
      sql: `DELETE FROM ${t} WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress'`,
      params: [key, token],
    }),
    renew: (key, token, leaseTtl) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "lease_expires_at" = ?, "expires_at" = ?
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [now + leaseTtl, now + leaseTtl, key, token, now],
      };
    },
    delete: (key) => ({ name: undefined, sql: `DELETE FROM ${t} WHERE "key" = ?`, params: [key] }),
    insertIfAbsent: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        name: undefined,
        sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
VALUES (?, 'in_progress', ?, ?, ?, NULL, ?, ?)
ON CONFLICT ("key") DO NOTHING
RETURNING "key"`,
        params: [key, token, now + ttl, fingerprint ?? null, now + ttl, now],
      };
    },
    readAny: (key) => ({
      name: undefined,
      sql: `SELECT ${RECORD_COLUMNS}, ("expires_at" <= ?) AS dead FROM ${t} WHERE "key" = ?`,
      params: [clock(), key],
    }),
    takeOver: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "status" = 'in_progress', "lease_token" = ?, "lease_expires_at" = ?, "fingerprint" = ?,
  "result" = NULL, "expires_at" = ?, "created_at" = ?
WHERE "key" = ? AND "expires_at" <= ?
RETURNING "key"`,
        params: [token, now + ttl, fingerprint ?? null, now + ttl, now, key, now],
      };
    },
    finish: (key, result, ttl) => ({
      name: undefined,
      sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL WHERE "key" = ?`,
      params: [result, clock() + ttl, key],
    }),
    purgeBatch: (limit) => ({
      name: undefined,
      sql: `DELETE FROM ${t} WHERE "key" IN (SELECT "key" FROM ${t} WHERE "expires_at" <= ? ORDER BY "expires_at" LIMIT ?)`,
      params: [clock(), limit],
    }),
    probe: () => ({ name: undefined, sql: probeSql(t), params: [] }),
  };
}

function probeSql(t: string): string {
  return `SELECT "key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at" FROM ${t} WHERE 1 = 0`;
}

/** PostgreSQL tables land in the DataSource's `schema` when the name does not give one, as TypeORM's own entities do. */
export function defaultSchemaOf(dataSource: DataSource): string | undefined {
  return dialectOf(dataSource) === 'postgres' ? (dataSource.options as { schema?: string }).schema : undefined;
}

const recordSqlCache = new WeakMap<DataSource, Map<string, RecordSql>>();

/**
 * The record SQL for a table of a DataSource (cached; the DataSource's schema applies to
 * unqualified names), with or without prepared-statement names. Shared by the store and
 * `runIdempotentTransaction`, so both write the same table the same way.
 */
export function recordSqlFor(dataSource: DataSource, tableName: string = DEFAULT_RECORDS_TABLE, preparedStatements = true): RecordSql {
  return cachedRecordSql(dataSource, tableName, preparedStatements ? 'prepared' : 'unprepared');
}

/**
 * The record SQL the server behind `dataSource` takes: `sql` itself, except on the MySQL
 * family where it asks the server once whether the claim may end in RETURNING (see
 * `claimReturningOf`, the one place MySQL 8 and MariaDB differ).
 */
export async function serverRecordSql(dataSource: DataSource, sql: RecordSql): Promise<RecordSql> {
  if (sql.dialect !== 'mysql') return sql;
  const returning = await claimReturningOf(dataSource);
  return returning === sql.claimReturning ? sql : cachedRecordSql(dataSource, nameOf(sql.table), returning ? 'returning' : 'plain');
}

function nameOf(table: TableName): string {
  return table.schema ? `${table.schema}.${table.table}` : table.table;
}

/** `prepared`/`unprepared`: PostgreSQL's choice (SQLite and MySQL ignore it); `returning`/`plain`: MySQL's claim. */
function cachedRecordSql(dataSource: DataSource, tableName: string, variant: 'prepared' | 'unprepared' | 'returning' | 'plain'): RecordSql {
  let byTable = recordSqlCache.get(dataSource);
  if (!byTable) recordSqlCache.set(dataSource, (byTable = new Map()));
  const cacheKey = `${tableName}\0${variant}`;
  let sql = byTable.get(cacheKey);
  if (!sql) {
    const table = parseTableName(tableName, defaultSchemaOf(dataSource));
    const dialect = dialectOf(dataSource);
    sql =
      dialect === 'postgres'
        ? postgresRecordSql(table, variant !== 'unprepared')
        : dialect === 'mysql'
          ? mysqlRecordSql(table, variant === 'returning')
          : sqliteRecordSql(table);
    byTable.set(cacheKey, sql);
  }
  return sql;
}
