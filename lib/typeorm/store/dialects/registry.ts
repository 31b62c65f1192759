import type { DataSource } from 'typeorm';
import type { RecordDialect, SqlDialect } from '../../../sql/dialect.js';
import { mysqlDialect } from '../../../sql/dialects/mysql.js';
import { dropMysqlRecordsTableDdl, mysqlRecordsTableDdl } from '../../../sql/dialects/mysql-statements.js';
import { postgresDialect } from '../../../sql/dialects/postgres.js';
import {
  DEFAULT_RECORDS_TABLE,
  dropQuotedRecordsTableDdl,
  parseTableName,
  quotedRecordsTableDdl,
  type TableName,
} from '../../../sql/dialects/records-table.js';
import { sqliteDialect } from '../../../sql/dialects/sqlite.js';
import { stepStatements } from '../../../sql/dialects/steps-table.js';
import { dialectOf } from '../../dialect.js';

/** What the registry knows of one dialect module. */
interface DialectModule {
  /** The dialect on one table (`prepared`: PostgreSQL's prepared statements; the others ignore it). */
  create(table: TableName, prepared: boolean): SqlDialect;
  /** The DDL of the records table, and what drops it (the migration's `down`). */
  createTable(name: TableName): string[];
  dropTable(name: TableName): string[];
  /** An unqualified table name lives in the DataSource's `schema` option (as TypeORM's own entities do). */
  readonly usesDataSourceSchema: boolean;
}

/** The one place that lists the dialects TypeORM reaches: adding one is a module under lib/sql/dialects/ and a line here. */
const DIALECTS: Record<RecordDialect, DialectModule> = {
  postgres: {
    create: postgresDialect,
    createTable: quotedRecordsTableDdl,
    dropTable: dropQuotedRecordsTableDdl,
    usesDataSourceSchema: true,
  },
  mysql: { create: mysqlDialect, createTable: mysqlRecordsTableDdl, dropTable: dropMysqlRecordsTableDdl, usesDataSourceSchema: false },
  sqlite: {
    create: (table) => sqliteDialect(table),
    createTable: quotedRecordsTableDdl,
    dropTable: dropQuotedRecordsTableDdl,
    usesDataSourceSchema: false,
  },
};

/**
 * The DDL of the records table: one text for PostgreSQL and SQLite, another for MySQL and
 * MariaDB (`dialect: 'mysql'`). Idempotent (`IF NOT EXISTS`), so `ensureTable()` and the
 * migration can both run it safely.
 */
export function recordsTableDdl(name: TableName, dialect: 'postgres' | 'sqlite' | 'mysql' = 'postgres'): string[] {
  // Any other value (from JavaScript) gets the double-quoted DDL, as it always did.
  return (DIALECTS[dialect] ?? DIALECTS.postgres).createTable(name);
}

/**
 * The DDL of the step records table beside the records table `name` (`<table>_steps`,
 * docs/steps.md), for the same dialects as `recordsTableDdl`. Idempotent (`IF NOT
 * EXISTS`). The store's `verify()` wants it beside every records table.
 */
export function stepsTableDdl(name: TableName, dialect: 'postgres' | 'sqlite' | 'mysql' = 'postgres'): string[] {
  return stepStatements(dialect in DIALECTS ? dialect : 'postgres', name).createTable();
}

export function dropRecordsTableDdl(name: TableName, dialect: RecordDialect): string[] {
  return DIALECTS[dialect].dropTable(name);
}

/** PostgreSQL tables land in the DataSource's `schema` when the name does not give one, as TypeORM's own entities do. */
export function defaultSchemaOf(dataSource: DataSource): string | undefined {
  return DIALECTS[dialectOf(dataSource)].usesDataSourceSchema ? (dataSource.options as { schema?: string }).schema : undefined;
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
    dialect = DIALECTS[dialectOf(dataSource)].create(table, preparedStatements);
    byTable.set(cacheKey, dialect);
  }
  return dialect;
}
