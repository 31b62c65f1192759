import type { SqlDialect } from '../sql/dialect.js';
import { mysqlDialect } from '../sql/dialects/mysql.js';
import { postgresDialect } from '../sql/dialects/postgres.js';
import type { TableFixes } from '../sql/failures.js';
import type { DrizzleSqlDatabase } from './drizzle-database.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './table-name.js';

/** How a Drizzle user creates the records table, or replaces a foreign one (the hints of a configuration error). */
export const DRIZZLE_TABLE_FIXES: TableFixes = {
  missingTable: (name) =>
    `Create it before the application serves requests: export every table of idempotencyPgTables('${name}') ` +
    `(or idempotencyMysqlTables('${name}')) from your Drizzle schema (docs/drizzle.md, "The tables") and run drizzle-kit ` +
    `generate and migrate (or push), or call store.ensureTable() at startup.`,
  missingColumn:
    `It was not created by this library: drop or rename it and create it from the table definitions of 'nestjs-idempotency/drizzle' ` +
    `(drizzle-kit) or with store.ensureTable(), or point the store's tableName option at another table.`,
};

/** How a Drizzle user creates the steps table beside the records table. */
export const DRIZZLE_STEPS_FIX =
  'Create it: export every table of idempotencyPgTables() (or idempotencyMysqlTables()) from your Drizzle schema, steps included, ' +
  'and run drizzle-kit generate and migrate, or call store.ensureTable().';

const dialects = new WeakMap<DrizzleSqlDatabase, Map<string, SqlDialect>>();

/**
 * The record statements of `database` on `tableName`, built once per database, table and
 * preparation (their texts are constant, and the MySQL dialect keeps its server variant).
 */
export function recordDialectOf(database: DrizzleSqlDatabase, tableName: string = DEFAULT_RECORDS_TABLE, prepared = true): SqlDialect {
  let known = dialects.get(database);
  if (!known) dialects.set(database, (known = new Map()));
  const cacheKey = `${prepared ? 'p' : 'u'}:${tableName}`;
  let dialect = known.get(cacheKey);
  if (!dialect) {
    const table = parseTableName(tableName);
    dialect = database.dialect === 'postgres' ? postgresDialect(table, prepared) : mysqlDialect(table);
    known.set(cacheKey, dialect);
  }
  return dialect;
}
