import type { DataSource } from 'typeorm';
import type { MysqlPool } from '../internals.js';
import type { SqlResult, Statement } from '../../sql/statement.js';

/**
 * Runs one statement straight on the DataSource's mysql2 pool, as TypeORM's query runner
 * would (same client-side parameter formatting, same query timeout), minus the runner's
 * own cost per statement (check out, events, result mapping, release), which is more app
 * CPU than the statement. Reported to the DataSource's logger like TypeORM's own queries.
 */
export function runMysqlStatement(dataSource: DataSource, pool: MysqlPool, statement: Statement): Promise<SqlResult> {
  const logger = dataSource.logger;
  logger.logQuery(statement.sql, statement.params);
  const options = dataSource.options as { maxQueryExecutionTime?: number; enableQueryTimeout?: boolean };
  const slowAfter = options.maxQueryExecutionTime;
  const query = options.enableQueryTimeout && slowAfter ? { sql: statement.sql, timeout: slowAfter } : statement.sql;
  const startedAt = Date.now();
  return new Promise((resolve, reject) => {
    pool.query(query, statement.params, (error, raw) => {
      const tookMs = Date.now() - startedAt;
      if (slowAfter && tookMs > slowAfter) logger.logQuerySlow(tookMs, statement.sql, statement.params);
      if (error) {
        logger.logQueryError(error, statement.sql, statement.params);
        reject(error);
        return;
      }
      if (Array.isArray(raw)) {
        resolve({ rows: raw as Record<string, unknown>[], affected: raw.length });
        return;
      }
      resolve(mysqlHeaderOf(raw) ?? { rows: [], affected: 0 });
    });
  });
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
 * without CLIENT_FOUND_ROWS (mysql2 sets it by default; `flags: '-FOUND_ROWS'` clears it)
 * its affected rows would say 0. The server's info line "Rows matched: n" says what the
 * WHERE clause found; the other statements report affected rows as found rows already.
 */
export function mysqlHeaderOf(raw: unknown): { rows: Record<string, unknown>[]; affected: number; insertId: number } | undefined {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw) || !('affectedRows' in raw)) return undefined;
  const packet = raw as MysqlOkPacket;
  const matched = typeof packet.info === 'string' ? /Rows matched:\s*(\d+)/.exec(packet.info) : null;
  return { rows: [], affected: matched ? Number(matched[1]) : Number(packet.affectedRows), insertId: Number(packet.insertId ?? 0) };
}
