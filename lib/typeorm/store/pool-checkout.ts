import { onDeadline, type DeadlineSignal } from '../../sql/deadline-signal.js';
import type { DataSource } from 'typeorm';
import type { MysqlPool, PgPool, PgQueryable } from '../internals.js';
import type { SqlResult, Statement } from '../../sql/statement.js';
import { discardConnecting, discardConnection, discardOpeningMysqlConnections, freeStuckMysqlSlots } from './connection-discard.js';
import { runMysqlStatement } from './mysql-statement.js';
import { runPgStatement } from './pg-statement.js';

/*
 * One statement on a connection checked out of the driver's pool for it, so that the
 * connection is known when the statement runs past the store's deadline and can be
 * destroyed instead of returned (`pool.query` would hand it back to the next request,
 * stuck). `pool.query` does the same checkout inside; the cost per statement is the same.
 */

interface PgPoolClient extends PgQueryable {
  /** Back to the pool; with an error, destroyed (pg-pool). */
  release(error?: Error | boolean): void;
}

/** A statement of the store on a pg client of its own, destroyed if `signal` aborts. */
export async function runPgStatementDiscarding(
  dataSource: DataSource,
  pool: PgPool,
  statement: Statement,
  signal: DeadlineSignal,
): Promise<SqlResult> {
  // A checkout past the deadline: the connections being opened are stuck (sql/pg-pool.ts).
  const stopCheckout = onDeadline(signal, () => discardConnecting(dataSource));
  let client: PgPoolClient;
  try {
    client = await (pool.connect as () => Promise<PgPoolClient>)();
  } finally {
    stopCheckout();
  }
  // Checked out after the deadline: healthy but late, so straight back, the statement not run.
  if (signal.aborted) {
    client.release();
    throw signal.reason;
  }
  const stopWatching = onDeadline(signal, () => discardConnection(dataSource, client));
  try {
    return await runPgStatement(dataSource, client, statement);
  } finally {
    stopWatching();
    client.release(signal.aborted ? true : undefined);
  }
}

interface MysqlPoolConnection extends MysqlPool {
  release(): void;
  destroy(): void;
}

/** A statement of the store on a mysql2 connection of its own, destroyed if `signal` aborts. */
export async function runMysqlStatementDiscarding(
  dataSource: DataSource,
  pool: MysqlPool,
  statement: Statement,
  signal: DeadlineSignal,
): Promise<SqlResult> {
  // Every slot taken: those stuck opening are freed first; a checkout past the deadline frees them too (connection-discard.ts).
  freeStuckMysqlSlots(pool);
  const stopCheckout = onDeadline(signal, () => discardOpeningMysqlConnections(pool));
  let connection: MysqlPoolConnection;
  try {
    connection = await new Promise<MysqlPoolConnection>((resolve, reject) => {
      (pool as unknown as { getConnection(cb: (error: Error | null, connection: MysqlPoolConnection) => void): void }).getConnection(
        (error, connection) => (error ? reject(error) : resolve(connection)),
      );
    });
  } finally {
    stopCheckout();
  }
  if (signal.aborted) {
    connection.release();
    throw signal.reason;
  }
  const stopWatching = onDeadline(signal, () => {
    discardConnection(dataSource, connection);
    // A statement that got no answer: a connection still opening on the same path gets none either.
    discardOpeningMysqlConnections(pool);
  });
  try {
    return await runMysqlStatement(dataSource, connection, statement);
  } finally {
    stopWatching();
    // After destroy() mysql2's release is a no-op: the connection left its pool.
    connection.release();
  }
}
