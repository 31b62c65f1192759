import type { DataSource, QueryRunner } from 'typeorm';

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

/** Destroys the connection a query runner holds (none before `connect()` resolved: a late one is released by its caller). */
export function discardRunnerConnection(dataSource: DataSource, runner: QueryRunner): void {
  discardConnection(dataSource, (runner as { databaseConnection?: unknown }).databaseConnection);
}
