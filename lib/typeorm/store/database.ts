import { onDeadline, type DeadlineSignal } from '../../sql/deadline-signal.js';
import type { DataSource, QueryRunner } from 'typeorm';
import { isConnectionLoss } from '../../sql/failures.js';
import type { ConnectionDeadline, IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from '../../sql/port.js';
import type { SqlResult, Statement } from '../../sql/statement.js';
import { dialectOf } from '../dialect.js';
import { discardRunnerConnection, freeStuckSlotsOf } from './connection-discard.js';
import { withOwnConnection } from './lock-holder.js';
import { sqlExecutorOf, withRunner } from './sql-executor.js';

/** A transaction of the TypeORM store: its query runner is what the work's EntityManager runs on. */
export interface TypeOrmTransaction extends SqlTransaction {
  readonly runner: QueryRunner;
}

/**
 * The port (`lib/sql/port.ts`) on a TypeORM DataSource: statements go through the
 * DataSource's executor (`sqlExecutorOf`: straight to the pg or mysql2 pool where it can,
 * prepared on PostgreSQL), held connections and transactions are query runners.
 */
class TypeOrmDatabase implements SqlDatabase<TypeOrmTransaction> {
  constructor(readonly identity: DataSource) {}

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    return sqlExecutorOf(this.identity).run(statement, signal);
  }

  withConnection<T>(fn: (connection: SqlConnection) => Promise<T>, deadline?: ConnectionDeadline): Promise<T> {
    const dataSource = this.identity;
    // SQLite: the single connection, under the mutex (or the transaction's, when inside one).
    if (dialectOf(dataSource) === 'sqlite') return withRunner(dataSource, 'sqlite', (runner) => fn(connectionOn(dataSource, runner)));
    // MySQL / MariaDB with every slot taken: the connections stuck opening are freed first (connection-discard.ts).
    freeStuckSlotsOf(dataSource);
    return withOwnConnection(dataSource, (runner) => fn(connectionOn(dataSource, runner)), deadline);
  }

  transaction<T>(
    isolation: IdempotentIsolationLevel | undefined,
    fn: (tx: TypeOrmTransaction) => Promise<T>,
    deadline?: ConnectionDeadline,
  ): Promise<T> {
    freeStuckSlotsOf(this.identity);
    return withOwnConnection(this.identity, (runner) => transactionOn(this.identity, runner, isolation, fn, deadline), deadline);
  }
}

/**
 * The database of a call nested in an idempotent transaction on the same DataSource: its
 * transactions are savepoints of the outer one (TypeORM's `startTransaction` on a runner
 * already in a transaction), so the inner record commits or rolls back with the outer work.
 */
export function nestedDatabase(dataSource: DataSource, outer: QueryRunner): SqlDatabase<TypeOrmTransaction> {
  const db = typeormDatabaseOf(dataSource);
  return {
    identity: dataSource,
    run: (statement, signal) => db.run(statement, signal),
    withConnection: (fn, deadline) => db.withConnection(fn, deadline),
    transaction: (_isolation, fn, deadline) =>
      onAbortDiscarding(dataSource, outer, deadline, () => transactionOn(dataSource, outer, undefined, fn, deadline)),
  };
}

const databases = new WeakMap<DataSource, TypeOrmDatabase>();

/** The port on `dataSource` (one per DataSource: the port's caches are keyed by it). */
export function typeormDatabaseOf(dataSource: DataSource): SqlDatabase<TypeOrmTransaction> {
  let db = databases.get(dataSource);
  if (!db) databases.set(dataSource, (db = new TypeOrmDatabase(dataSource)));
  return db;
}

function connectionOn(dataSource: DataSource, runner: QueryRunner): SqlConnection {
  return { run: (statement) => sqlExecutorOf(dataSource).runOn(runner, statement) };
}

/** Runs `call` with the outer transaction's connection destroyed if `deadline` aborts (a nested transaction holds no connection of its own). */
async function onAbortDiscarding<T>(
  dataSource: DataSource,
  runner: QueryRunner,
  deadline: ConnectionDeadline | undefined,
  call: () => Promise<T>,
): Promise<T> {
  const stopWatching = onDeadline(deadline?.signal, () => discardRunnerConnection(dataSource, runner));
  try {
    return await call();
  } finally {
    stopWatching();
  }
}

/**
 * Bounds every query of `runner` by `deadline` until the returned function is called: the
 * work's own statements run on the transaction's runner, and one stuck there would hold
 * the request as long as a stuck record statement.
 */
function boundQueries(runner: QueryRunner, deadline: ConnectionDeadline | undefined): () => void {
  if (!deadline) return () => undefined;
  const own = Object.prototype.hasOwnProperty.call(runner, 'query');
  const query = runner.query;
  runner.query = ((...args: Parameters<QueryRunner['query']>) => deadline.bound(() => query.apply(runner, args))) as QueryRunner['query'];
  return () => {
    if (own) runner.query = query;
    else delete (runner as { query?: unknown }).query;
  };
}

async function transactionOn<T>(
  dataSource: DataSource,
  runner: QueryRunner,
  isolation: IdempotentIsolationLevel | undefined,
  fn: (tx: TypeOrmTransaction) => Promise<T>,
  deadline?: ConnectionDeadline,
): Promise<T> {
  const executor = sqlExecutorOf(dataSource);
  const tx = { runner, connectionLost: false, run: (statement: Statement) => executor.runOn(runner, statement) };
  const unbind = boundQueries(runner, deadline);
  try {
    return await transactionBody(runner, isolation, tx, fn);
  } finally {
    unbind();
  }
}

async function transactionBody<T>(
  runner: QueryRunner,
  isolation: IdempotentIsolationLevel | undefined,
  tx: TypeOrmTransaction & { connectionLost: boolean },
  fn: (tx: TypeOrmTransaction) => Promise<T>,
): Promise<T> {
  if (isolation) await runner.startTransaction(isolation);
  else await runner.startTransaction();
  let committing = false;
  try {
    const value = await fn(tx);
    committing = true;
    await runner.commitTransaction();
    return value;
  } catch (error) {
    if (!committing) {
      try {
        await runner.rollbackTransaction();
      } catch (rollbackError) {
        // The database aborts the transaction by itself when the session dies; report the first error.
        if (isConnectionLoss(rollbackError)) tx.connectionLost = true;
      }
    }
    // Our runner is released only after this returns: released now means TypeORM saw its client fail.
    if (runner.isReleased) tx.connectionLost = true;
    throw error;
  }
}
