import type { DataSource, QueryRunner } from 'typeorm';
import { discardConnectingPgClients } from '../../sql/pg-pool.js';
import { pgPoolOf } from '../internals.js';

/*
 * Discarding a connection that ran past the store's deadline (`statementTimeout`): its
 * socket is stuck (a stalled path, a server that stopped answering), so it must never go
 * back to the pool, where the next request would wait on it too. Destroying the socket
 * fails whatever still waits on it; the server rolls back an open transaction when it
 * sees the session end.
 */

/** A node-postgres client, as far as discarding it goes. */
interface PgClientSocket {
  _queryable?: boolean;
  connection?: { stream?: { destroy(error?: Error): void } };
}

/** A mysql2 connection, as far as discarding it goes (a pool connection's `destroy` also takes it out of its pool). */
interface MysqlConnection {
  destroy(): void;
}

/**
 * Destroys a pooled connection of the DataSource's driver: a pg client (marked not
 * queryable first, so pg-pool discards it on release rather than hand it out again) or a
 * mysql2 connection.
 */
export function discardConnection(dataSource: DataSource, connection: unknown): void {
  if (!connection || typeof connection !== 'object') return;
  try {
    if (dataSource.options.type === 'postgres') {
      const client = connection as PgClientSocket;
      client._queryable = false;
      client.connection?.stream?.destroy();
    } else if (typeof (connection as Partial<MysqlConnection>).destroy === 'function') {
      (connection as MysqlConnection).destroy();
    }
  } catch {
    // Discarding is best effort: the call failed at its deadline already.
  }
}

/**
 * Destroys the connection a query runner holds. None yet (its checkout ran past the
 * deadline): on PostgreSQL, the pool's connections still being opened are destroyed
 * (sql/pg-pool.ts: on a dead path their startup never gets an answer, and each holds a
 * slot of the pool for good); a late checkout is released by its caller.
 */
export function discardRunnerConnection(dataSource: DataSource, runner: QueryRunner): void {
  const connection = (runner as { databaseConnection?: unknown }).databaseConnection;
  if (connection) discardConnection(dataSource, connection);
  else discardConnecting(dataSource);
}

/** A checkout ran past its deadline: destroys the pg pool's connections still being opened. */
export function discardConnecting(dataSource: DataSource): void {
  const pool = pgPoolOf(dataSource);
  if (pool) discardConnectingPgClients(pool);
}
