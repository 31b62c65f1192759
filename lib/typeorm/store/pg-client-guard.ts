import type { DataSource, QueryRunner } from 'typeorm';
import { pgClientsOf, pgPoolOf, type PgClient } from '../internals.js';

/**
 * A query runner from a DataSource whose pg clients cannot crash the process.
 *
 * node-postgres reports a connection dropped by the server (`pg_terminate_backend`, a
 * failover) as an 'error' event on the client, and TypeORM leaves some clients without
 * a listener for a moment, so the event can go unhandled and kill the process (found by
 * the reliability harness). The query in flight rejects by itself and the pool discards
 * the broken client, so a listener that ignores the event is all that is needed.
 */
export function createGuardedQueryRunner(dataSource: DataSource): QueryRunner {
  guardPgClientErrors(dataSource);
  return dataSource.createQueryRunner();
}

const guardedDataSources = new WeakSet<DataSource>();

/** Installs the guard on the DataSource's pg pool, once; nothing for other drivers (or before `initialize()`). */
export function guardPgClientErrors(dataSource: DataSource): void {
  if (guardedDataSources.has(dataSource)) return;
  const pool = pgPoolOf(dataSource);
  if (!pool) return;
  guardedDataSources.add(dataSource);
  for (const client of pgClientsOf(pool)) guardClient(client);
  pool.on('connect', guardClient);
}

function guardClient(client: PgClient): void {
  if (!client.listeners('error').includes(ignoreClientError)) client.on('error', ignoreClientError);
}

function ignoreClientError(): void {}
