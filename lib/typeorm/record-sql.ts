import { createHash } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../core/errors.js';

/** The SQL families the record store speaks. */
export type RecordDialect = 'postgres' | 'sqlite';

/** TypeORM driver types served by the SQLite dialect (all single-connection drivers). */
const SQLITE_FAMILY = new Set(['sqlite', 'better-sqlite3', 'sqljs', 'capacitor', 'cordova', 'expo', 'nativescript', 'react-native']);

export const DEFAULT_RECORDS_TABLE = 'idempotency_records';

export function dialectOf(dataSource: DataSource): RecordDialect {
  const type = String(dataSource.options.type);
  if (type === 'postgres') return 'postgres';
  if (SQLITE_FAMILY.has(type)) return 'sqlite';
  throw new IdempotencyConfigurationError(
    `The TypeORM idempotency store does not support the '${type}' driver.`,
    "Use a DataSource of type 'postgres' (shared, multi-instance) or a SQLite driver such as 'sqljs' or 'better-sqlite3' (embedded, one process); for other databases use the Redis store.",
  );
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** A validated, possibly schema-qualified table name. */
export interface TableName {
  readonly schema: string | undefined;
  readonly table: string;
  /** `"schema"."table"` or `"table"`, safe to embed in SQL. */
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
 * The DDL of the records table, identical for PostgreSQL and SQLite. Idempotent
 * (`IF NOT EXISTS`), so `ensureTable()` and the migration can both run it safely.
 */
export function recordsTableDdl(name: TableName): string[] {
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

export function dropRecordsTableDdl(name: TableName): string[] {
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
   * plans the statement once per connection instead of on every call.
   */
  readonly name?: string;
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
  /** Transactional path: inserts a lease row, or nothing when the key exists (waits for an uncommitted duplicate). */
  insertIfAbsent(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
  /** Transactional path: the row whatever its state, with `dead` telling whether it expired. */
  readAny(key: string): Statement;
  /** Transactional path: takes a dead row over (locks it until commit). */
  takeOver(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
  /** Transactional path: turns the (own, uncommitted) lease into the completed record. */
  finish(key: string, result: string, ttl: number): Statement;
  /** Deletes up to `limit` dead rows. */
  purgeBatch(limit: number): Statement;
}

const PG_NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

/**
 * `prepared`: each kind of statement gets a prepared-statement name derived from its
 * text (which depends on the table only). Parsing and planning these statements cost
 * PostgreSQL more CPU than running them: prepared once per connection, a claim +
 * complete costs the server about 0.5 ms instead of 1.1–1.3 ms (`npm run bench:postgres`).
 */
export function postgresRecordSql(table: TableName, prepared = true): RecordSql {
  const sql = buildPostgresRecordSql(table);
  return prepared ? withStatementNames(sql) : sql;
}

function withStatementNames(sql: RecordSql): RecordSql {
  const named: Record<string, unknown> = { ...sql };
  for (const [kind, build] of Object.entries(sql)) {
    if (typeof build !== 'function') continue;
    let text: string | undefined;
    let name: string | undefined;
    named[kind] = (...args: unknown[]): Statement => {
      const statement = (build as (...values: unknown[]) => Statement)(...args);
      if (text === undefined) {
        text = statement.sql;
        name = `nestjs_idem_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
      }
      return statement.sql === text ? { sql: statement.sql, params: statement.params, name } : statement;
    };
  }
  return named as unknown as RecordSql;
}

function buildPostgresRecordSql(table: TableName): RecordSql {
  const t = table.quoted;
  return {
    dialect: 'postgres',
    table,
    claim: (key, token, leaseTtl, fingerprint) => ({
      // One round trip. A live row visible in the statement's snapshot is returned as is,
      // and the INSERT then gets no input row: a duplicate's claim takes no row lock and no
      // transaction id, so it costs no WAL flush. Otherwise the upsert inserts, or takes a
      // dead row over. When a concurrent claimer committed after this statement's snapshot
      // but before its conflict check, neither branch returns a row; the caller then runs
      // the statement again (see TypeOrmIdempotencyStore.claim).
      sql: `WITH clock AS (SELECT ${PG_NOW} AS now_ms),
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
      params: [key, token, leaseTtl, fingerprint ?? null],
    }),
    read: (key) => ({
      sql: `SELECT ${RECORD_COLUMNS} FROM ${t} WHERE "key" = $1 AND "expires_at" > ${PG_NOW}`,
      params: [key],
    }),
    complete: (key, token, result, ttl) => ({
      sql: `UPDATE ${t} SET "status" = 'completed', "result" = $3, "expires_at" = c.now_ms + $4::bigint, "lease_token" = NULL, "lease_expires_at" = NULL
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress' AND "lease_expires_at" > c.now_ms`,
      params: [key, token, result, ttl],
    }),
    release: (key, token) => ({
      sql: `DELETE FROM ${t} WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress'`,
      params: [key, token],
    }),
    renew: (key, token, leaseTtl) => ({
      sql: `UPDATE ${t} SET "lease_expires_at" = c.now_ms + $3::bigint, "expires_at" = c.now_ms + $3::bigint
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "lease_token" = $2 AND "status" = 'in_progress' AND "lease_expires_at" > c.now_ms`,
      params: [key, token, leaseTtl],
    }),
    delete: (key) => ({ sql: `DELETE FROM ${t} WHERE "key" = $1`, params: [key] }),
    insertIfAbsent: (key, token, ttl, fingerprint) => ({
      sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
SELECT $1::varchar, 'in_progress', $2::varchar, now_ms + $3::bigint, $4::varchar, NULL, now_ms + $3::bigint, now_ms FROM (SELECT ${PG_NOW} AS now_ms) c
ON CONFLICT ("key") DO NOTHING
RETURNING "key"`,
      params: [key, token, ttl, fingerprint ?? null],
    }),
    readAny: (key) => ({
      sql: `SELECT ${RECORD_COLUMNS}, ("expires_at" <= ${PG_NOW}) AS dead FROM ${t} WHERE "key" = $1`,
      params: [key],
    }),
    takeOver: (key, token, ttl, fingerprint) => ({
      sql: `UPDATE ${t} SET "status" = 'in_progress', "lease_token" = $2, "lease_expires_at" = c.now_ms + $3::bigint, "fingerprint" = $4,
  "result" = NULL, "expires_at" = c.now_ms + $3::bigint, "created_at" = c.now_ms
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1 AND "expires_at" <= c.now_ms
RETURNING "key"`,
      params: [key, token, ttl, fingerprint ?? null],
    }),
    finish: (key, result, ttl) => ({
      sql: `UPDATE ${t} SET "status" = 'completed', "result" = $2, "expires_at" = c.now_ms + $3::bigint, "lease_token" = NULL, "lease_expires_at" = NULL
FROM (SELECT ${PG_NOW} AS now_ms) c
WHERE "key" = $1`,
      params: [key, result, ttl],
    }),
    purgeBatch: (limit) => ({
      // SKIP LOCKED: a row being taken over right now is left alone instead of waited for.
      sql: `DELETE FROM ${t} WHERE "key" IN (
  SELECT "key" FROM ${t} WHERE "expires_at" <= ${PG_NOW} ORDER BY "expires_at" LIMIT $1 FOR UPDATE SKIP LOCKED
)`,
      params: [limit],
    }),
  };
}

export function sqliteRecordSql(table: TableName, clock: () => number = Date.now): RecordSql {
  const t = table.quoted;
  return {
    dialect: 'sqlite',
    table,
    claim: (key, token, leaseTtl, fingerprint) => {
      const now = clock();
      // SQLite returns nothing when the conditional update does not fire; the store
      // then reads the live row (sql.js runs one statement at a time, so no lock is needed).
      return {
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
    read: (key) => ({ sql: `SELECT ${RECORD_COLUMNS} FROM ${t} WHERE "key" = ? AND "expires_at" > ?`, params: [key, clock()] }),
    complete: (key, token, result, ttl) => {
      const now = clock();
      return {
        sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [result, now + ttl, key, token, now],
      };
    },
    release: (key, token) => ({
      sql: `DELETE FROM ${t} WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress'`,
      params: [key, token],
    }),
    renew: (key, token, leaseTtl) => {
      const now = clock();
      return {
        sql: `UPDATE ${t} SET "lease_expires_at" = ?, "expires_at" = ?
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [now + leaseTtl, now + leaseTtl, key, token, now],
      };
    },
    delete: (key) => ({ sql: `DELETE FROM ${t} WHERE "key" = ?`, params: [key] }),
    insertIfAbsent: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
VALUES (?, 'in_progress', ?, ?, ?, NULL, ?, ?)
ON CONFLICT ("key") DO NOTHING
RETURNING "key"`,
        params: [key, token, now + ttl, fingerprint ?? null, now + ttl, now],
      };
    },
    readAny: (key) => ({
      sql: `SELECT ${RECORD_COLUMNS}, ("expires_at" <= ?) AS dead FROM ${t} WHERE "key" = ?`,
      params: [clock(), key],
    }),
    takeOver: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        sql: `UPDATE ${t} SET "status" = 'in_progress', "lease_token" = ?, "lease_expires_at" = ?, "fingerprint" = ?,
  "result" = NULL, "expires_at" = ?, "created_at" = ?
WHERE "key" = ? AND "expires_at" <= ?
RETURNING "key"`,
        params: [token, now + ttl, fingerprint ?? null, now + ttl, now, key, now],
      };
    },
    finish: (key, result, ttl) => ({
      sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL WHERE "key" = ?`,
      params: [result, clock() + ttl, key],
    }),
    purgeBatch: (limit) => ({
      sql: `DELETE FROM ${t} WHERE "key" IN (SELECT "key" FROM ${t} WHERE "expires_at" <= ? ORDER BY "expires_at" LIMIT ?)`,
      params: [clock(), limit],
    }),
  };
}
