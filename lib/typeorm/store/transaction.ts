import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import {
  IdempotencyConfigurationError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from '../../core/errors.js';
import type { IdempotencyEventListener } from '../../core/events.js';
import { checkWholeNumber } from '../../core/options.js';
import type { TransactionalRequest, TransactionalResult } from '../../core/store.js';
import { dataSourceOf } from '../internals.js';
import { configurationErrorOf, isConnectionLoss, sqlStateOf, transientLockErrorOf } from './failures.js';
import { MutexTimeoutError, sqliteMutexOf } from './mutex.js';
import { createGuardedQueryRunner } from './pg-client-guard.js';
import { serverRecordSql, type RecordSql } from './record-sql.js';
import { completedResultOf, storableMysqlResult } from './result-capacity.js';
import { sqlExecutorOf, type SqlExecutor } from './sql-executor.js';
import { transactionContext } from './transaction-context.js';

/** Isolation levels accepted for the idempotent transaction. */
export type IdempotentIsolationLevel = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

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

/** Restarts of the acquisition phase before giving up (each one sees a newer snapshot). */
const MAX_ACQUIRE_ROUNDS = 5;

/**
 * MySQL family: how many times a transaction that InnoDB rolled back for a deadlock
 * (1213) or that ran into a lock wait timeout (1205) runs again before the caller gets
 * `IdempotencyStoreUnavailableError` (retriable: 503 with the same key).
 */
export const MAX_LOCK_RETRIES = 3;

type Acquisition =
  | { readonly kind: 'owned' }
  | { readonly kind: 'replay'; readonly result: string }
  | { readonly kind: 'in_flight'; readonly retryAfterMs: number }
  | { readonly kind: 'restart' };

/** What the error handler of a transaction needs to know about where an error came from. */
interface FailureTrace {
  /** Set when `work` threw (or returned something unusable): that error is the caller's. */
  work?: { readonly error: unknown };
  /** The transaction's own connection died (TypeORM released its runner, or the rollback could not reach the server). */
  connectionLost: boolean;
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
  sql: RecordSql,
  request: TransactionalRequest,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
  tuning: TransactionTuning = {},
  onEvent?: IdempotencyEventListener,
): Promise<TransactionalResult<T>> {
  checkWholeNumber('TypeOrmIdempotencyStore.runTransactional', 'ttl', request.ttl, { unit: 'ms', example: '86_400_000' });
  const trace: FailureTrace = { connectionLost: false };
  const nested = transactionContext.getStore()?.dataSource === dataSource;
  try {
    const path = { sql: await serverRecordSql(dataSource, sql), executor: sqlExecutorOf(dataSource), onEvent };
    if (path.sql.dialect !== 'mysql' || nested) return await openAndAttempt(dataSource, path, request, work, tuning, trace);
    return await retryingLockErrors(request.key, trace, onEvent, () => openAndAttempt(dataSource, path, request, work, tuning, trace));
  } catch (error) {
    // Inside an outer idempotent transaction, InnoDB rolled the OUTER one back: hand the
    // error on as it is, so the outer call recognises it and runs again.
    if (nested && transientLockErrorOf(error)) throw error;
    throw transactionFailure(error, trace, sql);
  }
}

/**
 * MySQL family: runs the whole transaction again when InnoDB rolled it back to break a
 * deadlock (1213) or a lock wait ran out (1205), at most MAX_LOCK_RETRIES times, after a
 * short random pause (so the transactions that deadlocked do not meet again in step).
 * Nothing of the failed attempt committed, so running the work again is safe for what it
 * wrote through the transaction. Each retry is reported as a `store_error` event.
 */
async function retryingLockErrors<T>(
  key: string,
  trace: FailureTrace,
  onEvent: IdempotencyEventListener | undefined,
  attempt: () => Promise<T>,
): Promise<T> {
  const startedAt = Date.now();
  for (let retry = 1; ; retry++) {
    try {
      return await attempt();
    } catch (error) {
      const kind = transientLockErrorOf(error);
      if (!kind || retry > MAX_LOCK_RETRIES || isIdempotencyError(error)) throw error;
      trace.work = undefined;
      trace.connectionLost = false;
      const what = kind === 'deadlock' ? 'InnoDB deadlock (1213)' : 'InnoDB lock wait timeout (1205)';
      try {
        onEvent?.({
          type: 'store_error',
          key,
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

/** The statements of the record and the way they reach the database. */
interface RecordPath {
  readonly sql: RecordSql;
  readonly executor: SqlExecutor;
  /** Where a result that can never be stored is reported (`response_not_storable`). */
  readonly onEvent: IdempotencyEventListener | undefined;
}

/** @internal Refuses a `TransactionTuning` value outside the one rule for numeric options. */
export function checkTuning(owner: string, tuning: TransactionTuning): void {
  checkWholeNumber(owner, 'waitTimeout', tuning.waitTimeout, { unit: 'ms', min: 0, example: '5_000' });
}

function transactionFailure(error: unknown, trace: FailureTrace, sql: RecordSql): unknown {
  if (isIdempotencyError(error)) return error;
  // Retries ran out (or none were allowed): still a conflict that a later retry resolves,
  // whether the record statement or the work's own met it.
  if (transientLockErrorOf(error)) return new IdempotencyStoreUnavailableError(error);
  if (trace.work && trace.work.error === error) {
    // A cut connection surfaces inside the work as the driver's error on its next query;
    // that is an outage of the transaction, not something the work decided.
    return trace.connectionLost && isConnectionLoss(error) ? new IdempotencyStoreUnavailableError(error) : error;
  }
  return configurationErrorOf(error, sql.table) ?? new IdempotencyStoreUnavailableError(error);
}

async function openAndAttempt<T>(
  dataSource: DataSource,
  path: RecordPath,
  request: TransactionalRequest,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
  tuning: TransactionTuning,
  trace: FailureTrace,
): Promise<TransactionalResult<T>> {
  const outer = transactionContext.getStore();
  // Nested call on the same DataSource: join the running transaction through a savepoint,
  // so the inner record commits (or rolls back) with the outer work.
  if (outer && outer.dataSource === dataSource) {
    return attempt(outer.queryRunner, path, request, work, tuning, true, trace);
  }
  const open = async () => {
    const runner = createGuardedQueryRunner(dataSource);
    try {
      await runner.connect();
      return await attempt(runner, path, request, work, tuning, false, trace);
    } finally {
      await runner.release();
    }
  };
  if (path.sql.dialect === 'sqlite') {
    try {
      return await sqliteMutexOf(dataSource).run(open, tuning.waitTimeout);
    } catch (error) {
      if (error instanceof MutexTimeoutError) throw new IdempotencyInFlightError(tuning.waitTimeout ?? 1_000);
      throw error;
    }
  }
  return open();
}

async function attempt<T>(
  runner: QueryRunner,
  path: RecordPath,
  request: TransactionalRequest,
  work: (manager: EntityManager) => Promise<{ value: T; result: string }>,
  tuning: TransactionTuning,
  nested: boolean,
  trace: FailureTrace,
): Promise<TransactionalResult<T>> {
  const { sql, executor } = path;
  const defaultIsolation = sql.dialect === 'mysql' ? undefined : 'READ COMMITTED';
  const isolation = nested || sql.dialect === 'sqlite' ? undefined : (tuning.isolationLevel ?? defaultIsolation);
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
      const acquired =
        sql.dialect === 'mysql'
          ? await acquireMysql(runner, path, request, tuning.waitTimeout)
          : await acquire(runner, path, request, tuning.waitTimeout, nested);
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
      const context = { dataSource: dataSourceOf(runner), queryRunner: runner, manager: runner.manager };
      let outcome: { value: T; result: string };
      try {
        outcome = await transactionContext.run(context, () => work(runner.manager));
        if (typeof outcome?.result !== 'string') {
          throw new IdempotencyConfigurationError(
            'The transactional work must return { value, result } with result a string.',
            'A custom caller of TypeOrmIdempotencyStore.runTransactional() must serialize the result it stores; runIdempotentTransaction() does it for you.',
          );
        }
      } catch (error) {
        trace.work = { error };
        throw error;
      }
      // MySQL family: a result the table cannot take would roll the work back on every retry.
      const result =
        sql.dialect === 'mysql'
          ? await storableMysqlResult(
              dataSourceOf(runner),
              sql.table,
              request.key,
              outcome.result,
              (event) => path.onEvent?.(event),
              (text, params) => runner.query(text, params),
            )
          : outcome.result;
      const finished = await executor.runOn(runner, sql.finish(request.key, result, request.ttl));
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

/**
 * Inserts the lease row first. `ON CONFLICT DO NOTHING` makes a concurrent duplicate wait
 * on the unique index until the first transaction ends: then it either inserts (the
 * first rolled back) or sees the committed record.
 */
async function acquire(
  runner: QueryRunner,
  { sql, executor }: RecordPath,
  request: TransactionalRequest,
  waitTimeout: number | undefined,
  nested: boolean,
): Promise<Acquisition> {
  const token = randomUUID();
  for (let step = 0; step < MAX_ACQUIRE_ROUNDS; step++) {
    const inserted = await guardRecordStatement(runner, sql, waitTimeout, nested, () =>
      executor.runOn(runner, sql.insertIfAbsent!(request.key, token, request.ttl, request.fingerprint)),
    );
    if (inserted === 'restart') return { kind: 'restart' };
    if (inserted.rows.length > 0) return { kind: 'owned' };
    const { rows } = await executor.runOn(runner, sql.readAny(request.key));
    if (rows.length === 0) continue; // deleted in between: insert again
    const row = rows[0];
    const dead = row.dead === true || row.dead === 1;
    if (dead) {
      // A dead lease or an expired result: take it over. The row lock makes concurrent
      // takers wait for this transaction and then find the row alive.
      const taken = await guardRecordStatement(runner, sql, waitTimeout, nested, () =>
        executor.runOn(runner, sql.takeOver!(request.key, token, request.ttl, request.fingerprint)),
      );
      if (taken === 'restart') return { kind: 'restart' };
      if (taken.rows.length > 0) return { kind: 'owned' };
      continue;
    }
    const storedFingerprint = row.fingerprint ?? undefined;
    if (request.fingerprint !== undefined && storedFingerprint !== undefined && storedFingerprint !== request.fingerprint) {
      throw new IdempotencyFingerprintMismatchError();
    }
    if (row.status === 'completed') return { kind: 'replay', result: completedResultOf(row.result) };
    // A live lease taken through the non-transactional claim() path with the same key.
    const leaseEnd = Number(row.lease_expires_at);
    return { kind: 'in_flight', retryAfterMs: Math.max(1_000, leaseEnd - Date.now()) };
  }
  return { kind: 'restart' };
}

/**
 * MySQL and MariaDB: the store's claim statement, inside the transaction. Its INSERT ... ON
 * DUPLICATE KEY UPDATE takes the key's row lock, so a concurrent duplicate waits on it
 * until the first transaction ends; the statement then reads the committed row (a locking
 * read, whatever the isolation level), and takes it over only if it is dead. So: inserted
 * or taken over (owned), or a live row that this transaction now holds locked until it
 * rolls back at once: a completed record (replay) or a lease of the regular claim path.
 *
 * Gap locks: a key that no row holds is locked as a gap, and two duplicates that both
 * waited for a first transaction that rolled back can each hold that gap and want to
 * insert into it; InnoDB breaks that with a deadlock error for one of them, which
 * `retryingLockErrors` runs again (it then finds the other's row).
 */
async function acquireMysql(
  runner: QueryRunner,
  { sql, executor }: RecordPath,
  request: TransactionalRequest,
  waitTimeout: number | undefined,
): Promise<Acquisition> {
  const token = randomUUID();
  const statement = sql.claim(request.key, token, request.ttl, request.fingerprint);
  let claimed;
  if (waitTimeout === undefined) {
    claimed = await executor.runOn(runner, statement);
  } else {
    // Session-wide on a pooled connection: set for this statement, then put back.
    await runner.query('SET @nestjs_idem_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ?', [
      Math.max(1, Math.ceil(waitTimeout / 1000)),
    ]);
    try {
      claimed = await executor.runOn(runner, statement);
    } catch (error) {
      if (transientLockErrorOf(error) === 'lock_wait_timeout') throw new IdempotencyInFlightError(waitTimeout);
      throw error;
    } finally {
      await runner.query('SET SESSION innodb_lock_wait_timeout = @nestjs_idem_wait').catch(() => undefined);
    }
  }
  let row: Record<string, unknown> | undefined;
  if (sql.claimReturning) {
    row = claimed.rows[0];
    if (row && row.status === 'in_progress' && row.lease_token === token) return { kind: 'owned' };
  } else {
    if ((claimed.insertId ?? 0) > 0) return { kind: 'owned' };
    row = (await executor.runOn(runner, sql.readAny(request.key))).rows[0];
  }
  if (!row) return { kind: 'restart' };
  const storedFingerprint = row.fingerprint ?? undefined;
  if (request.fingerprint !== undefined && storedFingerprint !== undefined && storedFingerprint !== request.fingerprint) {
    throw new IdempotencyFingerprintMismatchError();
  }
  if (row.status === 'completed') return { kind: 'replay', result: completedResultOf(row.result) };
  return { kind: 'in_flight', retryAfterMs: Math.max(1_000, Number(row.lease_expires_at) - Date.now()) };
}

/**
 * Runs one record statement of the acquisition on PostgreSQL: bounds its wait on the
 * unique index or row lock (`lock_timeout`, transaction-local) and maps a serialization
 * failure (stricter isolation levels) to a restart.
 */
async function guardRecordStatement<R>(
  runner: QueryRunner,
  sql: RecordSql,
  waitTimeout: number | undefined,
  nested: boolean,
  fn: () => Promise<R>,
): Promise<R | 'restart'> {
  if (sql.dialect !== 'postgres') return fn();
  // A savepoint keeps a failed insert from aborting the caller's outer transaction, and
  // rolling back to it also reverts the lock_timeout set after it.
  if (nested) await runner.query('SAVEPOINT nestjs_idempotency_acquire');
  try {
    let previous: string | undefined;
    if (waitTimeout !== undefined) {
      const rows = (await runner.query(`SELECT current_setting('lock_timeout') AS previous, set_config('lock_timeout', $1, true)`, [
        `${Math.max(1, Math.ceil(waitTimeout))}ms`,
      ])) as Array<{ previous: string }>;
      previous = rows[0].previous;
    }
    const result = await fn();
    if (previous !== undefined) await runner.query(`SELECT set_config('lock_timeout', $1, true)`, [previous]);
    if (nested) await runner.query('RELEASE SAVEPOINT nestjs_idempotency_acquire');
    return result;
  } catch (error) {
    if (nested) await runner.query('ROLLBACK TO SAVEPOINT nestjs_idempotency_acquire');
    const code = sqlStateOf(error);
    if (code === '55P03') throw new IdempotencyInFlightError(waitTimeout ?? 1_000);
    if ((code === '40001' || code === '40P01') && !nested) return 'restart';
    throw error;
  }
}
