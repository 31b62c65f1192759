/**
 * Every read of a field that TypeORM or node-postgres does not publish, and every shape
 * that differs between TypeORM 0.3 and 1.x, in one place: test/typeorm/internals.spec.ts
 * checks each of them on both versions (`npm run test:typeorm03` for 0.3), so an upgrade
 * that moves one breaks that test, not a request path.
 */
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';

/** The DataSource of a query runner or entity manager (`dataSource` on TypeORM 1.x, `connection` on 0.3). */
export function dataSourceOf(owner: QueryRunner | EntityManager): DataSource {
  return (owner as { dataSource?: DataSource }).dataSource ?? (owner as unknown as { connection: DataSource }).connection;
}

/** A node-postgres pool or client: both take a query config and return a promise. */
export interface PgQueryable {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** The node-postgres pool TypeORM's PostgreSQL driver keeps, as far as this library uses it. */
export interface PgPool extends PgQueryable {
  connect(): unknown;
  on(event: 'connect', listener: (client: PgClient) => void): unknown;
}

/** A pooled node-postgres client, as far as the client-error guard uses it. */
export interface PgClient {
  on(event: 'error', listener: () => void): unknown;
  listeners(event: 'error'): Function[];
}

/**
 * The pool of an initialized PostgreSQL DataSource (`driver.master`); undefined for other
 * drivers, before `initialize()` and after `destroy()`.
 */
export function pgPoolOf(dataSource: DataSource): PgPool | undefined {
  if (dataSource.options.type !== 'postgres') return undefined;
  const pool = (dataSource.driver as { master?: Partial<PgPool> }).master;
  return pool && typeof pool.query === 'function' && typeof pool.connect === 'function' && typeof pool.on === 'function'
    ? (pool as PgPool)
    : undefined;
}

/** The clients a pg pool holds right now (`pool._clients`), idle or checked out. */
export function pgClientsOf(pool: PgPool): readonly PgClient[] {
  return (pool as { _clients?: PgClient[] })._clients ?? [];
}

/**
 * The `pg` client a PostgreSQL query runner holds while connected (`databaseConnection`,
 * set by `connect()`, e.g. inside a transaction); undefined once released or on another driver.
 */
export function pgClientOf(runner: QueryRunner): PgQueryable | undefined {
  if (runner.isReleased || dataSourceOf(runner).options.type !== 'postgres') return undefined;
  const client = (runner as { databaseConnection?: Partial<PgQueryable> }).databaseConnection;
  return client && typeof client.query === 'function' ? (client as PgQueryable) : undefined;
}

/** A mysql2 pool (callback API), as far as this library uses it. */
export interface MysqlPool {
  query(
    options: string | { sql: string; timeout?: number },
    values: unknown[],
    callback: (error: Error | null, result: unknown) => void,
  ): unknown;
}

/**
 * The mysql2 pool TypeORM's `mysql` / `mariadb` driver keeps (`driver.pool`); undefined
 * for other drivers, with replication (TypeORM keeps a pool cluster then), before
 * `initialize()` and after `destroy()`.
 */
export function mysqlPoolOf(dataSource: DataSource): MysqlPool | undefined {
  const type = dataSource.options.type;
  if (type !== 'mysql' && type !== 'mariadb') return undefined;
  const pool = (dataSource.driver as { pool?: Partial<MysqlPool> }).pool;
  return pool && typeof pool.query === 'function' ? (pool as MysqlPool) : undefined;
}
