import type { IdempotencyEvent } from '../core/events.js';
import type { ClaimResult } from '../core/record.js';
import type { ClaimRequest, TransactionalRequest } from '../core/store.js';
import type { IdempotentIsolationLevel, SqlConnection, SqlDatabase } from './port.js';
import type { TableName } from './dialects/records-table.js';
import type { SqlResult, Statement } from './statement.js';

export type { IdempotentIsolationLevel } from './port.js';

/** Restarts of a transaction's acquisition phase before giving up (each one sees a newer snapshot). */
export const MAX_ACQUIRE_ROUNDS = 5;

/** The SQL families the record store speaks: one module each under `dialects/`. */
export type RecordDialect = 'postgres' | 'sqlite' | 'mysql';

/**
 * The record operations as SQL, one builder per statement.
 *
 * The row's `expires_at` is the instant it stops counting, whatever its state: the lease
 * end while `in_progress` (equal to `lease_expires_at`), the retention end once
 * `completed`. Claim, read and purge therefore test one indexed column.
 */
export interface RecordStatements {
  /**
   * Inserts a lease, or takes over a dead row; what it answers is read by
   * `SqlDialect.claimAnswer`. Inside a transaction, the MySQL family acquires with it too.
   */
  claim(key: string, token: string, leaseTtl: number, fingerprint: string | undefined): Statement;
  /** The live row, if any. */
  read(key: string): Statement;
  complete(key: string, token: string, result: string, ttl: number): Statement;
  release(key: string, token: string): Statement;
  renew(key: string, token: string, leaseTtl: number): Statement;
  delete(key: string): Statement;
  /** Transactional path: the row whatever its state, with `dead` telling whether it expired. */
  readAny(key: string): Statement;
  /** Transactional path: turns the (own, uncommitted) lease into the completed record. */
  finish(key: string, result: string, ttl: number): Statement;
  /**
   * Deletes up to `limit` dead rows, oldest expiry first; with `purgeResume`, only those
   * expiring at or after `from` (the previous batch's latest, undefined for the first).
   */
  purgeBatch(limit: number, from?: number): Statement;
  /** Selects every column the store needs and no row: `verify()`'s check of the table. */
  probe(): Statement;
}

/**
 * What one claim statement said: the claim's result, `'read'` (the statement does not
 * return a row it did not claim: read the live one with `read`), `'again'` (nothing
 * settled: a concurrent claimer committed after the statement's snapshot, or the row went
 * away; a new statement sees it), or a follow-up statement to run (see `ClaimFollowUp`).
 */
export type ClaimAnswer = ClaimResult | 'read' | 'again' | ClaimFollowUp;

/**
 * A claim that takes one more statement: MariaDB's claim leaves a dead row (expired, not
 * yet purged) as it is and says so; `followUp` takes it over while it is still dead, and
 * `answer` reads what that did (`'again'`: another claimer took it first).
 */
export interface ClaimFollowUp {
  readonly followUp: Statement;
  answer(result: SqlResult): ClaimResult | 'again';
}

/** What the acquisition step of an idempotent transaction found. */
export type Acquisition =
  | { readonly kind: 'owned' }
  | { readonly kind: 'replay'; readonly result: string }
  | { readonly kind: 'in_flight'; readonly retryAfterMs: number }
  | { readonly kind: 'restart' };

/** What the acquisition step of an idempotent transaction works with. */
export interface AcquireStep {
  /** The transaction's connection (its transaction is open). */
  readonly connection: SqlConnection;
  readonly request: TransactionalRequest;
  /** `TransactionTuning.waitTimeout`: the longest wait for a concurrent duplicate. */
  readonly waitTimeout: number | undefined;
  /** Joined an outer idempotent transaction on the same database (TypeORM). */
  readonly nested: boolean;
}

/** Runs one statement of a claim (on the connection the claim holds, or any pooled one). */
export type RunStatement = (statement: Statement) => Promise<SqlResult>;

/**
 * One SQL dialect of the record store (`postgres.ts`, `mysql.ts`, `sqlite.ts`) on one
 * table: its statements and everything else in which the databases differ. The record
 * logic (`records.ts`) and the transaction path (`transaction.ts`) call it and never ask
 * which database they talk to; each ORM's entry point picks the dialect of its database.
 */
export interface SqlDialect extends RecordStatements {
  readonly name: RecordDialect;
  /** The table, quoted the dialect's way. */
  readonly table: TableName;
  /** The DDL of the records table (`ensureTable()`, the migration). */
  createTable(): string[];
  /**
   * The variant of the server behind `db`, asked once per database (MySQL 8 or MariaDB:
   * whether the claim may end in RETURNING). Absent: this dialect is the server's.
   */
  forServer?(db: SqlDatabase): Promise<SqlDialect>;
  /**
   * Boot checks beyond the probe of the table, on the server's variant (MySQL family: the
   * result column, key collation and max_allowed_packet against `maxResultBytes`).
   */
  verify?(db: SqlDatabase, maxResultBytes: number): Promise<void>;

  /**
   * Runs the store's claim statements all on one connection (SQLite: the single one,
   * under its mutex, so the read after the claim sees its row). Absent: each statement
   * takes any pooled connection.
   */
  claimSession?<T>(db: SqlDatabase, claim: (run: RunStatement) => Promise<T>): Promise<T>;
  /** How a claim statement's answer reads. */
  claimAnswer(key: string, request: ClaimRequest, result: SqlResult): ClaimAnswer;
  /** Whether a claim statement that failed did nothing and only needs to run again (InnoDB deadlock, lock wait timeout). */
  claimMayRetry(error: unknown): boolean;
  /**
   * The result to store for `key`: `result` itself or, for one the table or server can
   * never take, the not-storable outcome standing for it (reported once). `connection`:
   * the caller's (inside a transaction). Absent: every result fits.
   */
  storableResult?(
    db: SqlDatabase,
    key: string,
    result: string,
    report: (event: IdempotencyEvent) => void,
    connection?: SqlConnection,
  ): Promise<string>;

  /**
   * Runs `purge` while this instance holds the table's purge lock (an advisory lock on
   * PostgreSQL and the MySQL family, on the connection `purge` gets as its lock holder),
   * or returns `{ ran: false }` when another one holds it. SQLite has one process: no lock.
   */
  withPurgeLock(
    db: SqlDatabase,
    purge: (lockHolder: SqlConnection | undefined) => Promise<number>,
  ): Promise<{ ran: boolean; deleted: number }>;
  /** Before each purge batch on the lock holder. */
  beforePurgeBatch?(lockHolder: SqlConnection): Promise<void>;
  /**
   * MariaDB: the latest expiry a purge batch deleted (it answers them, `DELETE ...
   * RETURNING`), where the next batch starts. Without it, each batch of a purge scans the
   * expiry index from its start, past every entry InnoDB has delete-marked and not yet
   * purged: the batches of one purge got slower and slower (12 ms to 52 ms per 1 000 rows
   * over 100 000 rows; the whole purge 4.7 s against 1.3 s: docs/performance.md, "What we
   * learned"). Absent: every batch from the start.
   */
  purgeResume?(result: SqlResult): number | undefined;

  /**
   * Why a whole idempotent transaction that failed with `error` may run again (InnoDB
   * rolled it back for a deadlock or a lock wait timeout), or undefined. Absent: never.
   */
  retriedTransaction?(error: unknown): string | undefined;
  /** Runs `open` (one transaction) when the single connection is free (SQLite), waiting at most `waitTimeout`. */
  serializeTransactions?<T>(db: SqlDatabase, waitTimeout: number | undefined, open: () => Promise<T>): Promise<T>;
  /** The isolation level a (not nested) idempotent transaction starts with. */
  isolationOf(requested: IdempotentIsolationLevel | undefined): IdempotentIsolationLevel | undefined;
  /** The transaction's first step: take the record's row (owned), or find it settled or in flight. */
  acquire(step: AcquireStep): Promise<Acquisition>;
}
