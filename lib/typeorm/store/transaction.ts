import type { DataSource, EntityManager } from 'typeorm';
import type { IdempotencyEventListener } from '../../core/events.js';
import { checkWholeNumber } from '../../core/options.js';
import type { TransactionalRequest, TransactionalResult } from '../../core/store.js';
import type { IdempotentIsolationLevel, SqlDatabase } from '../../sql/port.js';
import type { SqlDialect } from '../../sql/dialect.js';
import { runRecordTransaction } from '../../sql/transaction.js';
import { dataSourceOf } from '../internals.js';
import { nestedDatabase, typeormDatabaseOf, type TypeOrmTransaction } from './database.js';
import { TYPEORM_TABLE_FIXES } from './table-fixes.js';
import { transactionContext } from './transaction-context.js';

export type { IdempotentIsolationLevel } from '../../sql/port.js';
export { MAX_LOCK_RETRIES } from '../../sql/transaction.js';

/** Tuning shared by `runIdempotentTransaction` and `TypeOrmIdempotencyStore.runTransactional`. */
export interface TransactionTuning {
  /**
   * Longest wait, ms, for a concurrent duplicate's transaction to finish before giving up
   * with `IdempotencyInFlightError` (PostgreSQL `lock_timeout` on the record insert; on
   * MySQL and MariaDB `innodb_lock_wait_timeout`, which counts whole seconds, so the wait
   * is rounded up to one; on SQLite the wait for the single connection). `undefined` waits
   * as long as the first transaction runs (on MySQL: up to the server's
   * `innodb_lock_wait_timeout`, 50 s by default).
   * @default undefined
   */
  waitTimeout?: number;
  /**
   * Isolation of the transaction. Under REPEATABLE READ and SERIALIZABLE a duplicate that
   * waited for the first transaction hits a serialization failure on the record insert
   * (PostgreSQL); the transaction is then restarted (the record row is read in a fresh
   * snapshot), so callers still get the replay. On MySQL and MariaDB the record is always
   * read with a locking read, which sees the latest commit at any level.
   * @default 'READ COMMITTED' on PostgreSQL; the server's own on MySQL and MariaDB (InnoDB:
   * REPEATABLE READ); SQLite is always serializable
   */
  isolationLevel?: IdempotentIsolationLevel;
  /**
   * PostgreSQL: run the record statements as named prepared statements on the
   * DataSource's pool, so the server parses and plans each one once per connection
   * instead of on every call (docs/performance.md has the figures); inside a
   * transaction, on the transaction's connection.
   * Turn it off behind a pooler that cannot keep prepared statements, such as PgBouncer
   * in transaction mode before 1.21 (or without `max_prepared_statements`).
   * @default true
   */
  preparedStatements?: boolean;
  /**
   * Client-side deadline, ms, of each operation of the store on the database: a statement
   * (the claim, the complete, the record statements of the transaction and, in an
   * idempotent transaction, the work's own queries on its runner), the checkout of a pooled
   * connection with its BEGIN, and the COMMIT. Past it the request fails with
   * `IdempotencyStoreUnavailableError` (HTTP 503, retriable) and the stuck connection is
   * destroyed, not returned to the pool: a stalled network path or a database that stopped
   * answering costs each request at most this long. A duplicate that waits longer than this
   * for a first transaction (`waitTimeout` undefined) also gets the 503. `0`: no deadline.
   * Not applied on SQLite (in-process: nothing to stall).
   * @default 4_000 (a request stalled on its claim then gets its 503 within 5 s end to end)
   */
  statementTimeout?: number;
}

/** What a TypeORM idempotent transaction runs on: the DataSource's port, or the outer transaction's (nested). */
export interface TypeOrmTransactionParts<T> {
  /** Set when the call joins an outer idempotent transaction on the same DataSource. */
  readonly nested: SqlDatabase<TypeOrmTransaction> | undefined;
  /** The work inside the transaction's context (`getIdempotentTransaction()`), on its EntityManager. */
  readonly work: (tx: TypeOrmTransaction) => Promise<{ value: T; result: string }>;
}

/** @internal The TypeORM side of an idempotent transaction on `dataSource`. */
export function typeormTransactionParts<T>(
  dataSource: DataSource,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
): TypeOrmTransactionParts<T> {
  const outer = transactionContext.getStore();
  return {
    nested: outer?.dataSource === dataSource ? nestedDatabase(dataSource, outer.queryRunner) : undefined,
    work: ({ runner }) => {
      const context = { dataSource: dataSourceOf(runner), queryRunner: runner, manager: runner.manager };
      return transactionContext.run(context, () => work(runner.manager));
    },
  };
}

/**
 * Runs `work` in one transaction that first writes the idempotency record (the algorithm
 * is `runRecordTransaction` in lib/sql/transaction.ts): the business writes and the
 * completed record commit together, a concurrent duplicate waits and replays, and a
 * rollback or crash leaves no trace.
 * @internal shared by `runIdempotentTransaction` and (through SqlRecords) `TypeOrmIdempotencyStore.runTransactional`.
 */
export function runRecordTransactionOn<T>(
  dataSource: DataSource,
  dialect: SqlDialect,
  request: TransactionalRequest,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
  tuning: TransactionTuning = {},
  onEvent?: IdempotencyEventListener,
): Promise<TransactionalResult<T>> {
  const parts = typeormTransactionParts(dataSource, work);
  return runRecordTransaction({
    db: parts.nested ?? typeormDatabaseOf(dataSource),
    dialect,
    request,
    work: parts.work,
    tuning,
    nested: parts.nested !== undefined,
    onEvent,
    owner: 'TypeOrmIdempotencyStore',
    fixes: TYPEORM_TABLE_FIXES,
  });
}

/** @internal Refuses a `TransactionTuning` value outside the one rule for numeric options. */
export function checkTuning(owner: string, tuning: TransactionTuning): void {
  checkWholeNumber(owner, 'waitTimeout', tuning.waitTimeout, { unit: 'ms', min: 0, example: '4_000' });
  checkWholeNumber(owner, 'statementTimeout', tuning.statementTimeout, { unit: 'ms', min: 0, example: '4_000' });
}
