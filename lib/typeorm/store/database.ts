import type { DataSource, QueryRunner } from 'typeorm';
import { isConnectionLoss } from '../../sql/failures.js';
import type { IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from '../../sql/port.js';
import type { SqlResult, Statement } from '../../sql/statement.js';
import { dialectOf } from '../dialect.js';
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

  run(statement: Statement): Promise<SqlResult> {
    return sqlExecutorOf(this.identity).run(statement);
  }

  withConnection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    const dataSource = this.identity;
    // SQLite: the single connection, under the mutex (or the transaction's, when inside one).
    if (dialectOf(dataSource) === 'sqlite') return withRunner(dataSource, 'sqlite', (runner) => fn(connectionOn(dataSource, runner)));
    return withOwnConnection(dataSource, (runner) => fn(connectionOn(dataSource, runner)));
  }

  transaction<T>(isolation: IdempotentIsolationLevel | undefined, fn: (tx: TypeOrmTransaction) => Promise<T>): Promise<T> {
    return withOwnConnection(this.identity, (runner) => transactionOn(this.identity, runner, isolation, fn));
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
    run: (statement) => db.run(statement),
    withConnection: (fn) => db.withConnection(fn),
    transaction: (_isolation, fn) => transactionOn(dataSource, outer, undefined, fn),
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

async function transactionOn<T>(
  dataSource: DataSource,
  runner: QueryRunner,
  isolation: IdempotentIsolationLevel | undefined,
  fn: (tx: TypeOrmTransaction) => Promise<T>,
): Promise<T> {
  const executor = sqlExecutorOf(dataSource);
  const tx = { runner, connectionLost: false, run: (statement: Statement) => executor.runOn(runner, statement) };
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
