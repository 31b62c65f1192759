import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from '../../core/errors.js';
import type { IdempotencyEventListener } from '../../core/events.js';
import { checkWholeNumber } from '../../core/options.js';
import type { TransactionalRequest, TransactionalResult } from '../../core/store.js';
import { dataSourceOf } from '../internals.js';
import { serverDialect } from './dialects/registry.js';
import { MAX_ACQUIRE_ROUNDS, type IdempotentIsolationLevel, type SqlDialect } from './dialects/sql-dialect.js';
import { configurationErrorOf, isConnectionLoss, transientLockErrorOf } from './failures.js';
import { withOwnConnection } from './dialects/lock-holder.js';
import { sqlExecutorOf, type SqlExecutor } from './sql-executor.js';
import { transactionContext } from './transaction-context.js';

export type { IdempotentIsolationLevel } from './dialects/sql-dialect.js';

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
}

/**
 * MySQL family: how many times a transaction that InnoDB rolled back for a deadlock
 * (1213) or that ran into a lock wait timeout (1205) runs again before the caller gets
 * `IdempotencyStoreUnavailableError` (retriable: 503 with the same key).
 */
export const MAX_LOCK_RETRIES = 3;

/** What the error handler of a transaction needs to know about where an error came from. */
interface FailureTrace {
  /** Set when `work` threw (or returned something unusable): that error is the caller's. */
  work?: { readonly error: unknown };
  /** The transaction's own connection died (TypeORM released its runner, or the rollback could not reach the server). */
  connectionLost: boolean;
}

/** One idempotent transaction: what every step of it works with. */
interface TransactionRun<T> {
  readonly dataSource: DataSource;
  /** The server's variant of the dialect. */
  readonly dialect: SqlDialect;
  readonly executor: SqlExecutor;
  readonly request: TransactionalRequest;
  readonly work: (manager: EntityManager) => Promise<{ value: T; result: string }>;
  readonly tuning: TransactionTuning;
  /** Joins an outer idempotent transaction on the same DataSource (through a savepoint). */
  readonly nested: boolean;
  readonly trace: FailureTrace;
  /** Where a retried transaction and a result that can never be stored are reported. */
  readonly onEvent: IdempotencyEventListener | undefined;
}

/**
 * Runs `work` in one transaction that first writes the idempotency record: the business
 * writes and the completed record commit together, a concurrent duplicate blocks on
 * the key's unique index until then and replays, and a rollback or crash leaves no trace.
 *
 * Failures come out as the HTTP path reports them: the work's own errors unchanged,
 * unless they only say that the transaction's connection was cut; a missing records
 * table as `IdempotencyConfigurationError`; any other failure of the transaction itself
 * (connection lost, record statement or commit refused) as
 * `IdempotencyStoreUnavailableError` with the driver's error as `cause`. In every such
 * case nothing committed (or, for a cut during COMMIT, the retry replays what did).
 * @internal shared by `runIdempotentTransaction` and `TypeOrmIdempotencyStore.runTransactional`.
 */
export async function runRecordTransaction<T>(
  dataSource: DataSource,
  dialect: SqlDialect,
  request: TransactionalRequest,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
  tuning: TransactionTuning = {},
  onEvent?: IdempotencyEventListener,
): Promise<TransactionalResult<T>> {
  checkWholeNumber('TypeOrmIdempotencyStore.runTransactional', 'ttl', request.ttl, { unit: 'ms', example: '86_400_000' });
  const trace: FailureTrace = { connectionLost: false };
  const nested = transactionContext.getStore()?.dataSource === dataSource;
  try {
    const server = await serverDialect(dataSource, dialect);
    const run: TransactionRun<T> = {
      dataSource,
      dialect: server,
      executor: sqlExecutorOf(dataSource),
      request,
      work,
      tuning,
      nested,
      trace,
      onEvent,
    };
    if (!server.retriedTransaction || nested) return await openAndAttempt(run);
    return await retryingLockErrors(run, server.retriedTransaction);
  } catch (error) {
    // Inside an outer idempotent transaction, InnoDB rolled the OUTER one back: hand the
    // error on as it is, so the outer call recognises it and runs again.
    if (nested && transientLockErrorOf(error)) throw error;
    throw transactionFailure(error, trace, dialect);
  }
}

/**
 * Runs the whole transaction again when the dialect says the database rolled it back only
 * to break a conflict (MySQL family: a deadlock, 1213, or a lock wait that ran out, 1205),
 * at most MAX_LOCK_RETRIES times, after a short random pause (so the transactions that
 * deadlocked do not meet again in step). Nothing of the failed attempt committed, so
 * running the work again is safe for what it wrote through the transaction. Each retry is
 * reported as a `store_error` event.
 */
async function retryingLockErrors<T>(
  run: TransactionRun<T>,
  retried: (error: unknown) => string | undefined,
): Promise<TransactionalResult<T>> {
  const { request, trace, onEvent } = run;
  const startedAt = Date.now();
  for (let retry = 1; ; retry++) {
    try {
      return await openAndAttempt(run);
    } catch (error) {
      const what = retried(error);
      if (!what || retry > MAX_LOCK_RETRIES || isIdempotencyError(error)) throw error;
      trace.work = undefined;
      trace.connectionLost = false;
      try {
        onEvent?.({
          type: 'store_error',
          key: request.key,
          at: Date.now(),
          durationMs: Date.now() - startedAt,
          error,
          reason: `${what}: the idempotent transaction was rolled back and runs again (retry ${retry} of ${MAX_LOCK_RETRIES})`,
        });
      } catch {
        // A broken listener must not turn a retriable conflict into a failure.
      }
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 10 * retry));
    }
  }
}

/** @internal Refuses a `TransactionTuning` value outside the one rule for numeric options. */
export function checkTuning(owner: string, tuning: TransactionTuning): void {
  checkWholeNumber(owner, 'waitTimeout', tuning.waitTimeout, { unit: 'ms', min: 0, example: '5_000' });
}

function transactionFailure(error: unknown, trace: FailureTrace, dialect: SqlDialect): unknown {
  if (isIdempotencyError(error)) return error;
  // Retries ran out (or none were allowed): still a conflict that a later retry resolves,
  // whether the record statement or the work's own met it.
  if (transientLockErrorOf(error)) return new IdempotencyStoreUnavailableError(error);
  if (trace.work && trace.work.error === error) {
    // A cut connection surfaces inside the work as the driver's error on its next query;
    // that is an outage of the transaction, not something the work decided.
    return trace.connectionLost && isConnectionLoss(error) ? new IdempotencyStoreUnavailableError(error) : error;
  }
  return configurationErrorOf(error, dialect.table) ?? new IdempotencyStoreUnavailableError(error);
}

async function openAndAttempt<T>(run: TransactionRun<T>): Promise<TransactionalResult<T>> {
  const { dataSource, dialect } = run;
  // Nested call on the same DataSource: join the running transaction through a savepoint,
  // so the inner record commits (or rolls back) with the outer work.
  if (run.nested) return attempt(run, transactionContext.getStore()!.queryRunner);
  const open = () => withOwnConnection(dataSource, (runner) => attempt(run, runner));
  return dialect.serializeTransactions ? dialect.serializeTransactions(dataSource, run.tuning.waitTimeout, open) : open();
}

async function attempt<T>(run: TransactionRun<T>, runner: QueryRunner): Promise<TransactionalResult<T>> {
  const { dialect, executor, request, trace, nested } = run;
  const isolation = nested ? undefined : dialect.isolationOf(run.tuning.isolationLevel);
  const step = { runner, executor, request, waitTimeout: run.tuning.waitTimeout, nested };
  for (let round = 0; round < MAX_ACQUIRE_ROUNDS; round++) {
    if (isolation) await runner.startTransaction(isolation);
    else await runner.startTransaction();
    let open = true;
    const rollback = async () => {
      if (!open) return;
      open = false;
      await runner.rollbackTransaction();
    };
    try {
      const acquired = await dialect.acquire(step);
      if (acquired.kind === 'restart') {
        await rollback();
        continue;
      }
      if (acquired.kind === 'replay') {
        await rollback();
        return { kind: 'replay', result: acquired.result };
      }
      if (acquired.kind === 'in_flight') {
        await rollback();
        throw new IdempotencyInFlightError(acquired.retryAfterMs);
      }
      const outcome = await runWork(run, runner);
      // MySQL family: a result the table cannot take would roll the work back on every retry.
      const result = dialect.storableResult
        ? await dialect.storableResult(
            dataSourceOf(runner),
            request.key,
            outcome.result,
            (event) => run.onEvent?.(event),
            (text, params) => runner.query(text, params),
          )
        : outcome.result;
      const finished = await executor.runOn(runner, dialect.finish(request.key, result, request.ttl));
      if (finished.affected !== 1) throw new Error(`The idempotency record ${request.key} vanished inside its own transaction.`);
      open = false;
      await runner.commitTransaction();
      return { kind: 'executed', value: outcome.value };
    } catch (error) {
      try {
        await rollback();
      } catch (rollbackError) {
        // The database aborts the transaction by itself when the session dies; report the first error.
        if (isConnectionLoss(rollbackError)) trace.connectionLost = true;
      }
      // Our runner is released only after this returns: released now means TypeORM saw its client fail.
      if (runner.isReleased) trace.connectionLost = true;
      throw error;
    }
  }
  throw new Error(`The idempotency record ${request.key} kept changing under ${MAX_ACQUIRE_ROUNDS} attempts to take it; retry later.`);
}

/** Runs the work inside the transaction's context; an error of its own is traced as the work's. */
async function runWork<T>(run: TransactionRun<T>, runner: QueryRunner): Promise<{ value: T; result: string }> {
  const context = { dataSource: dataSourceOf(runner), queryRunner: runner, manager: runner.manager };
  try {
    const outcome = await transactionContext.run(context, () => run.work(runner.manager));
    if (typeof outcome?.result !== 'string') {
      throw new IdempotencyConfigurationError(
        'The transactional work must return { value, result } with result a string.',
        'A custom caller of TypeOrmIdempotencyStore.runTransactional() must serialize the result it stores; runIdempotentTransaction() does it for you.',
      );
    }
    return outcome;
  } catch (error) {
    run.trace.work = { error };
    throw error;
  }
}
