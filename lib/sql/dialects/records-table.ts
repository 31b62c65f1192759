import { IdempotencyConfigurationError } from '../../core/errors.js';

export const DEFAULT_RECORDS_TABLE = 'idempotency_records';

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

/** `schema.table` or `table`, as the user writes it (in hints). */
export function nameOf(table: TableName): string {
  return table.schema ? `${table.schema}.${table.table}` : table.table;
}

/** Name of the primary key constraint, shared by the entity, the migration and `ensureTable()`. */
export const primaryKeyNameOf = (table: string) => `pk_${table}`;
/** Name of the index purge and claim use, shared by the entity, the migration and `ensureTable()`. */
export const expiryIndexNameOf = (table: string) => `idx_${table}_expires_at`;

/** The DDL of the records table in double-quoted SQL (PostgreSQL and SQLite). Idempotent (`IF NOT EXISTS`). */
export function quotedRecordsTableDdl(name: TableName): string[] {
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

/** Drops what `quotedRecordsTableDdl` creates. */
export function dropQuotedRecordsTableDdl(name: TableName): string[] {
  return [
    `DROP INDEX IF EXISTS ${name.schema ? `"${name.schema}".` : ''}"${expiryIndexNameOf(name.table)}"`,
    `DROP TABLE IF EXISTS ${name.quoted}`,
  ];
}

/** Columns every record read returns, in this order (double-quoted SQL). */
export const RECORD_COLUMNS = `"status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at"`;

/** Selects every column the store needs and no row (double-quoted SQL): `verify()`'s check of the table. */
export function probeSql(t: string): string {
  return `SELECT "key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at" FROM ${t} WHERE 1 = 0`;
}
