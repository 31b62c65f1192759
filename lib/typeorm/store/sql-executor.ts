import type { DataSource, QueryRunner } from 'typeorm';
import { pgClientOf, pgPoolOf } from '../internals.js';
import { sqliteMutexOf } from './mutex.js';
import { createGuardedQueryRunner, guardPgClientErrors } from './pg-client-guard.js';
import { runPgStatement, type SqlResult } from './pg-statement.js';
import { dialectOf, type RecordDialect, type Statement } from './record-sql.js';
import { transactionContext } from './transaction-context.js';

export type { SqlResult } from './pg-statement.js';

/** How the record statements of one DataSource reach the database. */
export interface SqlExecutor {
  /** One statement outside any transaction. */
  run(statement: Statement): Promise<SqlResult>;
  /** One statement on a connection the caller holds (a transaction's, or the purge's lock holder). */
  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult>;
}

const executors = new WeakMap<DataSource, SqlExecutor>();

/**
 * The executor of a DataSource, chosen once: on PostgreSQL with node-postgres, statements
 * go to the pool (inside a transaction, to the transaction's own pg client) so they can be
 * prepared; anywhere else through TypeORM's query runner. The choice needs the pool, which
 * exists only once the DataSource is initialized, so an uninitialized one is not remembered.
 */
export function sqlExecutorOf(dataSource: DataSource): SqlExecutor {
  let executor = executors.get(dataSource);
  if (executor) return executor;
  const dialect = dialectOf(dataSource);
  executor = dialect === 'postgres' && pgPoolOf(dataSource) ? new PgPoolExecutor(dataSource) : new RunnerExecutor(dataSource, dialect);
  if (dataSource.isInitialized) executors.set(dataSource, executor);
  return executor;
}

class RunnerExecutor implements SqlExecutor {
  constructor(
    private readonly dataSource: DataSource,
    private readonly dialect: RecordDialect,
  ) {}

  run(statement: Statement): Promise<SqlResult> {
    return withRunner(this.dataSource, this.dialect, (runner) => runOnRunner(runner, statement));
  }

  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
    return runOnRunner(runner, statement);
  }
}

class PgPoolExecutor implements SqlExecutor {
  constructor(private readonly dataSource: DataSource) {
    guardPgClientErrors(dataSource);
  }

  run(statement: Statement): Promise<SqlResult> {
    // Looked up on every statement: destroy() and initialize() give the DataSource a new
    // pool, and after destroy() there is none (the query runner then reports the DataSource
    // as not connected, as TypeORM does).
    const pool = pgPoolOf(this.dataSource);
    if (pool) return runPgStatement(this.dataSource, pool, statement);
    return withRunner(this.dataSource, 'postgres', (runner) => runOnRunner(runner, statement));
  }

  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
    // A statement is prepared on the connection that runs it, so a named one must go to
    // the runner's own client; an unnamed one gains nothing from skipping TypeORM there.
    const client = statement.name === undefined ? undefined : pgClientOf(runner);
    if (client) return runPgStatement(this.dataSource, client, statement);
    return runOnRunner(runner, statement);
  }
}

async function runOnRunner(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
  const result = await runner.query(statement.sql, statement.params, true);
  const rows = (result.records ?? []) as Record<string, unknown>[];
  const header = mysqlHeaderOf(result.raw);
  if (header) return { rows, affected: header.affected, insertId: header.insertId };
  return { rows, affected: result.affected ?? rows.length };
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
function mysqlHeaderOf(raw: unknown): { affected: number; insertId: number } | undefined {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw) || !('affectedRows' in raw)) return undefined;
  const packet = raw as MysqlOkPacket;
  const matched = typeof packet.info === 'string' ? /Rows matched:\s*(\d+)/.exec(packet.info) : null;
  return { affected: matched ? Number(matched[1]) : Number(packet.affectedRows), insertId: Number(packet.insertId ?? 0) };
}

/**
 * Runs `fn` with a query runner suited to the dialect: a pooled connection of its own on
 * PostgreSQL; on SQLite the single connection, taken through the mutex unless the caller
 * already runs inside this library's transaction on the same DataSource (which holds it).
 */
export async function withRunner<T>(dataSource: DataSource, dialect: RecordDialect, fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  if (dialect === 'sqlite') {
    const context = transactionContext.getStore();
    if (context && context.dataSource === dataSource) return fn(context.queryRunner);
    return sqliteMutexOf(dataSource).run(() => withOwnRunner(dataSource, fn));
  }
  return withOwnRunner(dataSource, fn);
}

async function withOwnRunner<T>(dataSource: DataSource, fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  const runner = createGuardedQueryRunner(dataSource);
  try {
    return await fn(runner);
  } finally {
    await runner.release();
  }
}
