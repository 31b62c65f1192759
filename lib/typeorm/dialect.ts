import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../core/errors.js';
import type { RecordDialect } from '../sql/dialect.js';

/**
 * What the library needs to know about a DataSource's driver, read from its public
 * `options.type` (known before `initialize()`):
 * - `postgres`: PostgreSQL itself (the record store's shared dialect);
 * - `cockroachdb`: speaks PostgreSQL's SQL, and also aborts a transaction on a failed statement;
 * - `sqlite`: every single-connection SQLite driver;
 * - `mysql`: TypeORM's `mysql` and `mariadb` drivers (MySQL 8, MariaDB 10.11+, through mysql2);
 * - `other`: SQL Server, Oracle and the rest.
 */
export type DriverFamily = 'postgres' | 'cockroachdb' | 'sqlite' | 'mysql' | 'other';

/** TypeORM driver types served by SQLite (all single-connection drivers). */
const SQLITE_FAMILY = new Set(['sqlite', 'better-sqlite3', 'sqljs', 'capacitor', 'cordova', 'expo', 'nativescript', 'react-native']);

export function driverTypeOf(dataSource: DataSource): string {
  return String(dataSource.options.type);
}

export function driverFamilyOf(dataSource: DataSource): DriverFamily {
  const type = driverTypeOf(dataSource);
  if (type === 'postgres' || type === 'cockroachdb') return type;
  if (type === 'mysql' || type === 'mariadb') return 'mysql';
  return SQLITE_FAMILY.has(type) ? 'sqlite' : 'other';
}

export type { RecordDialect } from '../sql/dialect.js';

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
