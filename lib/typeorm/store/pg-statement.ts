import type { DataSource } from 'typeorm';
import type { PgQueryable } from '../internals.js';
import type { SqlResult, Statement } from '../../sql/statement.js';

/**
 * Runs one statement straight on a node-postgres pool or client, as a named prepared
 * statement when it has a name. TypeORM's query runner would cost more app CPU than the
 * query itself (check out, events, result mapping, release), so the store's own
 * statements skip it; they are still reported to the DataSource's logger, like TypeORM's own.
 */
export async function runPgStatement(dataSource: DataSource, target: PgQueryable, statement: Statement): Promise<SqlResult> {
  const logger = dataSource.logger;
  logger.logQuery(statement.sql, statement.params);
  const startedAt = Date.now();
  let result;
  try {
    result = await target.query({ name: statement.name, text: statement.sql, values: statement.params });
  } catch (error) {
    logger.logQueryError(error as Error, statement.sql, statement.params);
    throw error;
  }
  const slowAfter = dataSource.options.maxQueryExecutionTime;
  const tookMs = Date.now() - startedAt;
  if (slowAfter && tookMs > slowAfter) logger.logQuerySlow(tookMs, statement.sql, statement.params);
  return { rows: result.rows, affected: result.rowCount ?? result.rows.length };
}
