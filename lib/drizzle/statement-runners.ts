import type { SqlResult, Statement } from '../sql/statement.js';
import type { MysqlQueryable, PgQueryable } from './drizzle-internals.js';

/*
 * One statement of the record store straight on the driver under a Drizzle database:
 * drizzle's query path (building a SQL object, its logger, mapping rows) would cost more
 * app CPU than the statement, and on node-postgres only the driver can run it as a named
 * prepared statement. The user's own queries still go through drizzle.
 */

/** On a node-postgres pool or client: a named prepared statement when the statement has a name. */
export async function runPgStatement(target: PgQueryable, statement: Statement): Promise<SqlResult> {
  const result = await target.query({ name: statement.name, text: statement.sql, values: statement.params });
  return { rows: result.rows, affected: result.rowCount ?? result.rows.length };
}

/** On a mysql2 promise pool or connection (client-side formatting, as drizzle's own `db.execute`). */
export async function runMysqlStatement(target: MysqlQueryable, statement: Statement): Promise<SqlResult> {
  const [raw] = await target.query(statement.sql, statement.params);
  if (Array.isArray(raw)) return { rows: raw as Record<string, unknown>[], affected: raw.length };
  return mysqlOkPacketOf(raw) ?? { rows: [], affected: 0 };
}

/** The OK packet of a mysql2 statement that returned no rows, as far as the store reads it. */
interface MysqlOkPacket {
  affectedRows: number;
  insertId?: number | string;
  info?: string;
}

/**
 * Rows a MySQL statement FOUND, whatever the connection's flags: an UPDATE that sets the
 * values a row already has (a renew within the same millisecond) changes nothing, and
 * without CLIENT_FOUND_ROWS (mysql2 sets it by default) its affected rows would say 0. The
 * server's info line "Rows matched: n" says what the WHERE clause found.
 */
function mysqlOkPacketOf(raw: unknown): SqlResult | undefined {
  if (raw === null || typeof raw !== 'object' || !('affectedRows' in raw)) return undefined;
  const packet = raw as MysqlOkPacket;
  const matched = typeof packet.info === 'string' ? /Rows matched:\s*(\d+)/.exec(packet.info) : null;
  return { rows: [], affected: matched ? Number(matched[1]) : Number(packet.affectedRows), insertId: Number(packet.insertId ?? 0) };
}
