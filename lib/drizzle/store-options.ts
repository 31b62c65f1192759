import type { LoggerService } from '@nestjs/common';
import type { IdempotentIsolationLevel } from '../sql/port.js';
import type { PurgeResult } from '../sql/purge-schedule.js';

/** Tuning shared by `runIdempotentTransaction` and `DrizzleIdempotencyStore.runTransactional`. */
export interface DrizzleTransactionTuning {
  /**
   * Longest wait, ms, for a concurrent duplicate's transaction to finish before giving up
   * with `IdempotencyInFlightError` (PostgreSQL `lock_timeout` on the record insert; on
   * MySQL and MariaDB `innodb_lock_wait_timeout`, which counts whole seconds, so the wait
   * is rounded up to one). `undefined` waits as long as the first transaction runs (on
   * MySQL: up to the server's `innodb_lock_wait_timeout`, 50 s by default).
   * @default undefined
   */
  waitTimeout?: number;
  /**
   * Client-side deadline, ms, of each of the store's own operations on the database (a
   * statement, taking a connection and its BEGIN, the COMMIT). Past it the request fails
   * with `IdempotencyStoreUnavailableError` (HTTP 503, retriable), so a stalled network
   * path or a database that stopped answering costs each request at most this long. The
   * connection stuck past it is destroyed, not returned to the pool (with the connections
   * the pool was still opening, on node-postgres). The work's own queries on the
   * transaction are not bounded.
   * A duplicate that waits longer than this for a first transaction (`waitTimeout`
   * undefined) also gets the 503. `0`: no deadline. Not applied on SQLite.
   * @default 4_000 (a request stalled on its claim then gets its 503 within 5 s end to end)
   */
  statementTimeout?: number;
  /**
   * Isolation of the transaction. Under REPEATABLE READ and SERIALIZABLE a duplicate that
   * waited for the first transaction hits a serialization failure on the record insert
   * (PostgreSQL); the transaction is then restarted, so callers still get the replay. On
   * MySQL and MariaDB the record is always read with a locking read, which sees the latest
   * commit at any level.
   * @default 'READ COMMITTED' on PostgreSQL; the server's own on MySQL and MariaDB (InnoDB: REPEATABLE READ)
   */
  isolationLevel?: IdempotentIsolationLevel;
  /**
   * PostgreSQL: run the record statements as named prepared statements on the pool (inside
   * a transaction, on its connection), so the server parses and plans each one once per
   * connection. Turn it off behind a pooler that cannot keep prepared statements, such as
   * PgBouncer in transaction mode before 1.21.
   * @default true
   */
  preparedStatements?: boolean;
}

/** Options of `DrizzleIdempotencyStore`. */
export interface DrizzleIdempotencyStoreOptions extends DrizzleTransactionTuning {
  /**
   * Records table, `'table'` or `'schema.table'` (MySQL: `'database.table'`); an unqualified
   * name is found through the connection's `search_path` (PostgreSQL) or database (MySQL).
   * Its steps table is `<table>_steps` beside it. Use the same name in `idempotencyPgTables()`
   * / `idempotencyMysqlTables()` in your schema.
   * @default 'idempotency_records'
   */
  tableName?: string;
  /**
   * The largest result the store must hold, in bytes of serialized outcome. On MySQL /
   * MariaDB `verify()` refuses, at boot, a `result` column or a server `max_allowed_packet`
   * too small for it; a result that the table or server can never take is stored as "not
   * storable" (duplicates get a not-replayable error), never retried until its lease is lost.
   * @default 1_048_576 (the module's default maxResponseBytes)
   */
  maxResponseBytes?: number;
  /**
   * Runs `purgeExpired()` every this many ms in the background (the timer does not keep the
   * process alive), from the moment the store is known to work. Several instances may enable
   * it: an advisory lock lets one purge at a time. `undefined` or 0: off.
   * @default undefined
   */
  purgeInterval?: number;
  /**
   * Most rows deleted per statement by a purge, so no single statement holds many locks. A
   * batch that takes longer than a fifth of `statementTimeout` (at most 1 s) or fails halves
   * the next one (down to 10), quick ones double it back up to this; the size carries over to
   * the next purge. On MariaDB beside 16 claimers, one batch of 1 000 outlived the 5 s deadline
   * and failed the purge every time it ran.
   * @default 1000
   */
  purgeBatchSize?: number;
  /**
   * Called after every scheduled purge.
   * @default undefined
   */
  onPurge?: (result: PurgeResult) => void;
  /**
   * Called when a scheduled purge fails (the job keeps running). Listeners added with
   * `addEventListener` get a `store_error` event either way.
   * @default a warning through Nest's Logger (context `Idempotency`, one line per cause per
   * 10 s) when no event listener is registered; the module's listeners log it otherwise
   */
  onPurgeError?: (error: unknown) => void;
  /**
   * Where a failed background purge is written when nobody else reports it (see `onPurgeError`).
   * @default new Logger('Idempotency')
   */
  logger?: LoggerService;
}

export type { PurgeResult } from '../sql/purge-schedule.js';
