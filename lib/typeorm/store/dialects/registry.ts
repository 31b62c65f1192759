import type { DataSource } from 'typeorm';
import { dialectOf, type RecordDialect } from '../../dialect.js';
import { mysqlDialect } from './mysql.js';
import { dropMysqlRecordsTableDdl, mysqlRecordsTableDdl } from './mysql-statements.js';
import { postgresDialect } from './postgres.js';
import {
  DEFAULT_RECORDS_TABLE,
  dropQuotedRecordsTableDdl,
  parseTableName,
  quotedRecordsTableDdl,
  type TableName,
} from './records-table.js';
import type { SqlDialect } from './sql-dialect.js';
import { sqliteDialect } from './sqlite.js';

/**
 * The one place that knows every dialect: which one a DataSource speaks, and the DDL of
 * each (which the migration and `recordsTableDdl` need without a store).
 */

/**
 * The DDL of the records table: one text for PostgreSQL and SQLite, another for MySQL and
 * MariaDB (`dialect: 'mysql'`). Idempotent (`IF NOT EXISTS`), so `ensureTable()` and the
 * migration can both run it safely.
 */
export function recordsTableDdl(name: TableName, dialect: 'postgres' | 'sqlite' | 'mysql' = 'postgres'): string[] {
  return dialect === 'mysql' ? mysqlRecordsTableDdl(name) : quotedRecordsTableDdl(name);
}

export function dropRecordsTableDdl(name: TableName, dialect: RecordDialect): string[] {
  return dialect === 'mysql' ? dropMysqlRecordsTableDdl(name) : dropQuotedRecordsTableDdl(name);
}

/** PostgreSQL tables land in the DataSource's `schema` when the name does not give one, as TypeORM's own entities do. */
export function defaultSchemaOf(dataSource: DataSource): string | undefined {
  return dialectOf(dataSource) === 'postgres' ? (dataSource.options as { schema?: string }).schema : undefined;
}

const dialectCache = new WeakMap<DataSource, Map<string, SqlDialect>>();

/**
 * The dialect of a DataSource on one of its tables (cached; the DataSource's schema applies
 * to unqualified names), with or without prepared-statement names (PostgreSQL's choice,
 * the others ignore it). Shared by the store and `runIdempotentTransaction`, so both write
 * the same table the same way.
 */
export function dialectFor(dataSource: DataSource, tableName: string = DEFAULT_RECORDS_TABLE, preparedStatements = true): SqlDialect {
  let byTable = dialectCache.get(dataSource);
  if (!byTable) dialectCache.set(dataSource, (byTable = new Map()));
  const cacheKey = `${tableName}\0${preparedStatements ? 'prepared' : 'unprepared'}`;
  let dialect = byTable.get(cacheKey);
  if (!dialect) {
    const table = parseTableName(tableName, defaultSchemaOf(dataSource));
    const name = dialectOf(dataSource);
    dialect =
      name === 'postgres' ? postgresDialect(table, preparedStatements) : name === 'mysql' ? mysqlDialect(table) : sqliteDialect(table);
    byTable.set(cacheKey, dialect);
  }
  return dialect;
}

/** The variant of `dialect` that the server behind `dataSource` takes (see `SqlDialect.forServer`). */
export async function serverDialect(dataSource: DataSource, dialect: SqlDialect): Promise<SqlDialect> {
  return dialect.forServer ? dialect.forServer(dataSource) : dialect;
}
