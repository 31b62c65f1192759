import type { DeadlineSignal } from './deadline-signal.js';
import type { SqlResult, Statement } from './statement.js';

/*
 * The persistence port of the SQL record stores: what an ORM or driver (TypeORM, Prisma,
 * Drizzle) implements so that the record logic (records.ts: claim, complete, replay,
 * steps, purge, boot checks; transaction.ts: the idempotent transaction) and the
 * dialects' statements (dialects/) exist once. An implementation only moves statements:
 * it never parses, retries or interprets them.
 */

/** Isolation levels accepted for the idempotent transaction. */
export type IdempotentIsolationLevel = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

/** One connection of the database, as a statement reaches it. */
export interface SqlConnection {
  /**
   * Runs one statement with its positional parameters (`$1` on PostgreSQL, `?` on MySQL
   * and SQLite, as the dialect wrote them) and resolves with:
   * - `rows`: the rows it returned (SELECT, WITH, RETURNING), column names as written,
   *   numbers as numbers or bigints (`Number()` reads both), booleans as booleans or 0/1;
   * - `affected`: rows written (for an UPDATE on MySQL: rows found; mysql2's default);
   * - `insertId`: MySQL family, when the driver reports it (else leave it out).
   *
   * Rejects with the driver's error, or an error that carries it where `failures.ts`
   * reads it: the SQLSTATE in `code` (PostgreSQL), the MySQL error number in `errno`,
   * on the error itself, its `driverError` or its `cause`.
   */
  run(statement: Statement): Promise<SqlResult>;
}

/**
 * The client-side deadline of a held connection (`withConnection`, `transaction`), given
 * by the `statementTimeout` decorator (deadline.ts). An implementation that can, honours
 * `signal`: once it aborts, the connection is stuck (a stalled network path, a server
 * that stopped answering) and must be destroyed, never returned to the pool, where the
 * next request would wait on it too. One that cannot still fails at the deadline.
 */
export interface ConnectionDeadline {
  /** Aborted when an operation on the held connection ran past the deadline. */
  readonly signal: DeadlineSignal;
  /**
   * Bounds one more operation on the held connection by the same deadline (the work's own
   * statements inside an idempotent transaction); rejects at once after an abort.
   */
  bound<T>(operation: () => Promise<T>): Promise<T>;
}

/** The connection of an open transaction. */
export interface SqlTransaction extends SqlConnection {
  /**
   * True once the transaction's connection is known to be gone (its rollback failed for a
   * lost connection, or the driver dropped it): a failure of the work that only says the
   * connection was cut is then an outage (503), not the work's own error.
   */
  readonly connectionLost: boolean;
}

/** A database (a pool of connections) as the record store uses it. */
export interface SqlDatabase<Tx extends SqlTransaction = SqlTransaction> {
  /**
   * What per-database caches are keyed by (the server's variant, the MySQL result
   * capacity, the SQLite mutex): the DataSource, the PrismaClient, the Drizzle database.
   */
  readonly identity: object;
  /**
   * False when the implementation cannot destroy a connection whose operation ran past
   * the deadline (it leaves it to the driver): the deadline's error then says so.
   * @default true
   */
  readonly discardsStuckConnections?: boolean;
  /**
   * Runs one statement on any pooled connection, outside any transaction (autocommit).
   * When `signal` aborts (the statement ran past the deadline), the connection it holds
   * is destroyed rather than released, where the implementation can.
   */
  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult>;
  /**
   * Runs `fn` on one pooled connection held from its first statement to its last (a
   * session-level advisory lock's holder), released after.
   */
  withConnection<T>(fn: (connection: SqlConnection) => Promise<T>, deadline?: ConnectionDeadline): Promise<T>;
  /**
   * Runs `fn` in one transaction on one connection: begins it (at `isolation`, or the
   * database's default when undefined), commits when `fn` resolves, rolls back and
   * rethrows `fn`'s error when it rejects (a failed commit rejects too). Never retries.
   */
  transaction<T>(isolation: IdempotentIsolationLevel | undefined, fn: (tx: Tx) => Promise<T>, deadline?: ConnectionDeadline): Promise<T>;
}
