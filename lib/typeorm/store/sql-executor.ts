import { onDeadline, type DeadlineSignal } from '../../sql/deadline-signal.js';
import type { DataSource, QueryRunner } from 'typeorm';
import { mysqlPoolOf, pgClientOf, pgPoolOf } from '../internals.js';
import { mysqlHeaderOf, runMysqlStatement } from './mysql-statement.js';
import { sqliteMutexOf } from '../../sql/mutex.js';
import { createGuardedQueryRunner, guardPgClientErrors } from './pg-client-guard.js';
import { dialectOf, type RecordDialect } from '../dialect.js';
import type { SqlResult, Statement } from '../../sql/statement.js';
import { runPgStatement } from './pg-statement.js';
import { transactionContext } from './transaction-context.js';
import { discardRunnerConnection } from './connection-discard.js';
import { runMysqlStatementDiscarding, runPgStatementDiscarding } from './pool-checkout.js';

export type { SqlResult } from '../../sql/statement.js';

/** How the record statements of one DataSource reach the database. */
export interface SqlExecutor {
  /** One statement outside any transaction; when `signal` aborts, its connection is destroyed (see connection-discard.ts). */
  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult>;
  /** One statement on a connection the caller holds (a transaction's, or the purge's lock holder). */
  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult>;
}

const executors = new WeakMap<DataSource, SqlExecutor>();

/**
 * The executor of a DataSource, chosen once: on PostgreSQL with node-postgres, statements
 * go to the pool (inside a transaction, to the transaction's own pg client) so they can be
 * prepared; on MySQL / MariaDB outside a transaction, to the mysql2 pool; anywhere else
 * through TypeORM's query runner. The choice needs the pool, which
 * exists only once the DataSource is initialized, so an uninitialized one is not remembered.
 */
export function sqlExecutorOf(dataSource: DataSource): SqlExecutor {
  let executor = executors.get(dataSource);
  if (executor) return executor;
  const dialect = dialectOf(dataSource);
  executor =
    dialect === 'postgres' && pgPoolOf(dataSource)
      ? new PgPoolExecutor(dataSource)
      : dialect === 'mysql' && mysqlPoolOf(dataSource)
        ? new MysqlPoolExecutor(dataSource)
        : new RunnerExecutor(dataSource, dialect);
  if (dataSource.isInitialized) executors.set(dataSource, executor);
  return executor;
}

class RunnerExecutor implements SqlExecutor {
  constructor(
    private readonly dataSource: DataSource,
    private readonly dialect: RecordDialect,
  ) {}

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    return withRunner(this.dataSource, this.dialect, (runner) => {
      const stopWatching = onDeadline(signal, () => discardRunnerConnection(this.dataSource, runner));
      return runOnRunner(runner, statement).finally(stopWatching);
    });
  }

  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
    return runOnRunner(runner, statement);
  }
}

class PgPoolExecutor implements SqlExecutor {
  constructor(private readonly dataSource: DataSource) {
    guardPgClientErrors(dataSource);
  }

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    // Looked up on every statement: destroy() and initialize() give the DataSource a new
    // pool, and after destroy() there is none (the query runner then reports the DataSource
    // as not connected, as TypeORM does).
    const pool = pgPoolOf(this.dataSource);
    if (pool && signal) return runPgStatementDiscarding(this.dataSource, pool, statement, signal);
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

class MysqlPoolExecutor implements SqlExecutor {
  constructor(private readonly dataSource: DataSource) {}

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    // Looked up on every statement, as on PostgreSQL: destroy() and initialize() replace the pool.
    const pool = mysqlPoolOf(this.dataSource);
    if (pool && signal) return runMysqlStatementDiscarding(this.dataSource, pool, statement, signal);
    if (pool) return runMysqlStatement(this.dataSource, pool, statement);
    return withRunner(this.dataSource, 'mysql', (runner) => runOnRunner(runner, statement));
  }

  runOn(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
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
