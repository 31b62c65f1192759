import { onDeadline, type DeadlineSignal } from '../sql/deadline-signal.js';
import type { SqlResult, Statement } from '../sql/statement.js';
import type { MysqlPool, PgPool } from './drizzle-internals.js';
import { runMysqlStatement, runPgStatement } from './statement-runners.js';
import { discardConnectingPgClients, discardPgClient } from '../sql/pg-pool.js';

/*
 * One statement of the store on a connection checked out of the driver's pool for it, so
 * that the connection is known when the statement runs past the store's deadline
 * (`statementTimeout`) and is destroyed instead of returned: `pool.query` would hand a
 * socket a dead path holds (no reset ever comes, issue 42) back to the next request, and
 * the pool would never serve again. `pool.query` does the same checkout inside; the cost
 * per statement is the same.
 */

/** A statement of the store on a pg client of its own, destroyed if `signal` aborts. */
export async function runPgStatementDiscarding(pool: PgPool, statement: Statement, signal: DeadlineSignal): Promise<SqlResult> {
  // A checkout past the deadline: the connections being opened are stuck (see pg-pool.ts).
  const stopCheckout = onDeadline(signal, () => discardConnectingPgClients(pool));
  let client: Awaited<ReturnType<PgPool['connect']>>;
  try {
    client = await pool.connect();
  } finally {
    stopCheckout();
  }
  // Checked out after the deadline: healthy but late, so straight back, the statement not run.
  if (signal.aborted) {
    client.release();
    throw signal.reason;
  }
  const stopWatching = onDeadline(signal, () => discardPgClient(client));
  try {
    return await runPgStatement(client, statement);
  } finally {
    stopWatching();
    // With an error pg-pool destroys the client rather than keep it.
    client.release(signal.aborted ? signal.reason : undefined);
  }
}

/** A statement of the store on a mysql2 connection of its own, destroyed if `signal` aborts. */
export async function runMysqlStatementDiscarding(pool: MysqlPool, statement: Statement, signal: DeadlineSignal): Promise<SqlResult> {
  const connection = await pool.getConnection();
  if (signal.aborted) {
    connection.release();
    throw signal.reason;
  }
  const stopWatching = onDeadline(signal, () => connection.destroy());
  try {
    return await runMysqlStatement(connection, statement);
  } finally {
    stopWatching();
    // After destroy() mysql2's release is a no-op: the connection left its pool.
    if (!signal.aborted) connection.release();
  }
}
