import {
  IdempotencyConfigurationError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
} from '../core/errors.js';
import type { IdempotencyEventListener } from '../core/events.js';
import { checkWholeNumber } from '../core/options.js';
import type { TransactionalRequest, TransactionalResult } from '../core/store.js';
import { MAX_ACQUIRE_ROUNDS, type Acquisition, type SqlDialect } from './dialect.js';
import { configurationErrorOf, isConnectionLoss, transientLockErrorOf, type TableFixes } from './failures.js';
import { withDeadline } from './deadline.js';
import { TransactionOutbox } from './outbox-transaction.js';
import type { IdempotentIsolationLevel, SqlDatabase, SqlTransaction } from './port.js';

/** What the idempotent transaction reads of a store's (or a call's) tuning; each entry point documents its own. */
export interface SqlTransactionTuning {
  readonly waitTimeout?: number;
  /** ms; undefined: DEFAULT_STATEMENT_TIMEOUT_MS; 0: no client-side deadline (deadline.ts). */
  readonly statementTimeout?: number;
  readonly isolationLevel?: IdempotentIsolationLevel;
}

/**
 * MySQL family: how many times a transaction that InnoDB rolled back for a deadlock
 * (1213) or that ran into a lock wait timeout (1205) runs again before the caller gets
 * `IdempotencyStoreUnavailableError` (retriable: 503 with the same key).
 */
export const MAX_LOCK_RETRIES = 3;

/** One idempotent transaction, as an entry point asks for it. */
export interface RecordTransaction<T, Tx extends SqlTransaction> {
  /** Where it runs; for a nested one (TypeORM), a database whose transactions are savepoints of the outer one. */
  readonly db: SqlDatabase<Tx>;
  /** The dialect on the records table (its server's variant is asked of `db`). */
  readonly dialect: SqlDialect;
  readonly request: TransactionalRequest;
  /** The caller's work inside the transaction; `result` is what the record stores. */
  readonly work: (tx: Tx) => Promise<{ value: T; result: string }>;
  readonly tuning: SqlTransactionTuning;
  /** Joins an outer idempotent transaction (through a savepoint): no isolation level, no retry. */
  readonly nested: boolean;
  /** Where a retried transaction and a result that can never be stored are reported. */
  readonly onEvent: IdempotencyEventListener | undefined;
  /** The store's class name, in messages. */
  readonly owner: string;
  /** The hints of a missing or foreign records table. */
  readonly fixes: TableFixes;
}

/** What the error handler of a transaction needs to know about where an error came from. */
interface FailureTrace {
  /** Set when `work` threw (or returned something unusable): that error is the caller's. */
  work?: { readonly error: unknown };
  /** The transaction's own connection died (`SqlTransaction.connectionLost`). */
  connectionLost: boolean;
}

/**
 * `db` under the client-side deadline (`statementTimeout`), except on SQLite: an
 * in-process database has no network path to stall, and a statement abandoned there would
 * still hold its single connection.
 */
export function boundedDatabase<Tx extends SqlTransaction>(
  db: SqlDatabase<Tx>,
  dialect: SqlDialect,
  ms: number | undefined,
): SqlDatabase<Tx> {
  return dialect.name === 'sqlite' ? db : withDeadline(db, ms);
}

/** The variant of `dialect` that the server behind `db` takes (see `SqlDialect.forServer`). */
export async function serverDialect(db: SqlDatabase, dialect: SqlDialect): Promise<SqlDialect> {
  return dialect.forServer ? dialect.forServer(db) : dialect;
}

/**
 * Runs `work` in one transaction that first writes the idempotency record: the business
 * writes and the completed record commit together, a concurrent duplicate blocks on
 * the key's unique index (or row lock) until then and replays, and a rollback or crash
 * leaves no trace.
 *
 * Failures come out as the HTTP path reports them: the work's own errors unchanged,
 * unless they only say that the transaction's connection was cut; a missing records
 * table as `IdempotencyConfigurationError`; any other failure of the transaction itself
 * (connection lost, record statement or commit refused) as
 * `IdempotencyStoreUnavailableError` with the driver's error as `cause`. In every such
 * case nothing committed (or, for a cut during COMMIT, the retry replays what did).
 */
export async function runRecordTransaction<T, Tx extends SqlTransaction>(run: RecordTransaction<T, Tx>): Promise<TransactionalResult<T>> {
  checkWholeNumber(`${run.owner}.runTransactional`, 'ttl', run.request.ttl, { unit: 'ms', example: '86_400_000' });
  const trace: FailureTrace = { connectionLost: false };
  try {
    const db = boundedDatabase(run.db, run.dialect, run.tuning.statementTimeout);
    const server = await serverDialect(db, run.dialect);
    const attempt = { ...run, db, dialect: server };
    if (!server.retriedTransaction || run.nested) return await openAndAttempt(attempt, trace);
    return await retryingLockErrors(attempt, trace, server.retriedTransaction);
  } catch (error) {
    // Inside an outer idempotent transaction, InnoDB rolled the OUTER one back: hand the
    // error on as it is, so the outer call recognises it and runs again.
    if (run.nested && transientLockErrorOf(error)) throw error;
    throw transactionFailure(error, trace, run);
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
async function retryingLockErrors<T, Tx extends SqlTransaction>(
  run: RecordTransaction<T, Tx>,
  trace: FailureTrace,
  retried: (error: unknown) => string | undefined,
): Promise<TransactionalResult<T>> {
  const { request, onEvent } = run;
  const startedAt = Date.now();
  for (let retry = 1; ; retry++) {
    try {
      return await openAndAttempt(run, trace);
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

function transactionFailure(
  error: unknown,
  trace: FailureTrace,
  run: { readonly dialect: SqlDialect; readonly fixes: TableFixes },
): unknown {
  if (isIdempotencyError(error)) return error;
  // Retries ran out (or none were allowed): still a conflict that a later retry resolves,
  // whether the record statement or the work's own met it.
  if (transientLockErrorOf(error)) return new IdempotencyStoreUnavailableError(error);
  if (trace.work && trace.work.error === error) {
    // A cut connection surfaces inside the work as the driver's error on its next query;
    // that is an outage of the transaction, not something the work decided.
    return trace.connectionLost && isConnectionLoss(error) ? new IdempotencyStoreUnavailableError(error) : error;
  }
  return configurationErrorOf(error, run.dialect.table, run.fixes) ?? new IdempotencyStoreUnavailableError(error);
}

async function openAndAttempt<T, Tx extends SqlTransaction>(
  run: RecordTransaction<T, Tx>,
  trace: FailureTrace,
): Promise<TransactionalResult<T>> {
  const open = () => attempt(run, trace);
  // Nested: the outer transaction holds the connection already.
  if (run.nested || !run.dialect.serializeTransactions) return open();
  return run.dialect.serializeTransactions(run.db, run.tuning.waitTimeout, open);
}

/** Thrown out of the transaction's callback to roll back an acquisition that did not take the row. */
const SETTLED = Symbol('settled');

async function attempt<T, Tx extends SqlTransaction>(run: RecordTransaction<T, Tx>, trace: FailureTrace): Promise<TransactionalResult<T>> {
  const { db, dialect, request, nested } = run;
  const isolation = nested ? undefined : dialect.isolationOf(run.tuning.isolationLevel);
  for (let round = 0; round < MAX_ACQUIRE_ROUNDS; round++) {
    let settled: Exclude<Acquisition, { kind: 'owned' }> | undefined;
    let open: Tx | undefined;
    const outbox = new TransactionOutbox(request.key);
    try {
      const value = await db.transaction(isolation, async (tx) => {
        open = tx;
        const acquired = await dialect.acquire({ connection: tx, request, waitTimeout: run.tuning.waitTimeout, nested });
        if (acquired.kind !== 'owned') {
          settled = acquired;
          throw SETTLED;
        }
        const outcome = await runWork(run, tx, trace, outbox);
        // MySQL family: a result the table cannot take would roll the work back on every retry.
        const result = dialect.storableResult
          ? await dialect.storableResult(db, request.key, outcome.result, (event) => run.onEvent?.(event), tx)
          : outcome.result;
        const finished = await tx.run(dialect.finish(request.key, result, request.ttl));
        if (finished.affected !== 1) throw new Error(`The idempotency record ${request.key} vanished inside its own transaction.`);
        // The messages the work emitted commit with its writes and the record.
        await outbox.stageOn(tx, dialect);
        return outcome.value;
      });
      outbox.committed();
      return { kind: 'executed', value };
    } catch (error) {
      if (error === SETTLED && settled) {
        if (settled.kind === 'restart') continue;
        if (settled.kind === 'replay') return { kind: 'replay', result: settled.result };
        throw new IdempotencyInFlightError(settled.retryAfterMs);
      }
      if ((open as Tx | undefined)?.connectionLost) trace.connectionLost = true;
      throw error;
    }
  }
  throw new Error(`The idempotency record ${request.key} kept changing under ${MAX_ACQUIRE_ROUNDS} attempts to take it; retry later.`);
}

/** Runs the work; an error of its own is traced as the work's. */
async function runWork<T, Tx extends SqlTransaction>(
  run: RecordTransaction<T, Tx>,
  tx: Tx,
  trace: FailureTrace,
  outbox: TransactionOutbox,
): Promise<{ value: T; result: string }> {
  try {
    const outcome = await outbox.run(() => run.work(tx));
    if (typeof outcome?.result !== 'string') {
      throw new IdempotencyConfigurationError(
        'The transactional work must return { value, result } with result a string.',
        `A custom caller of ${run.owner}.runTransactional() must serialize the result it stores; runIdempotentTransaction() does it for you.`,
      );
    }
    return outcome;
  } catch (error) {
    trace.work = { error };
    throw error;
  }
}
