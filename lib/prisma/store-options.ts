import type { LoggerService } from '@nestjs/common';
import type { IdempotentIsolationLevel } from '../sql/port.js';
import type { PurgeResult } from '../sql/purge-schedule.js';
import type { PrismaProvider, PrismaTransactionOptions } from './prisma-client.js';

export type { PurgeResult } from '../sql/purge-schedule.js';

/** Tuning shared by `runIdempotentTransaction` and `PrismaIdempotencyStore.runTransactional`. */
export interface PrismaTransactionTuning extends PrismaTransactionOptions {
  /**
   * Longest wait, ms, for a concurrent duplicate's transaction to finish before giving up
   * with `IdempotencyInFlightError` (PostgreSQL `lock_timeout` on the record insert; on
   * MySQL and MariaDB `innodb_lock_wait_timeout`, rounded up to whole seconds).
   * `undefined` waits as long as the first transaction runs (bounded by `timeout`).
   * @default undefined
   */
  waitTimeout?: number;
  /**
   * Client-side deadline, ms, of each of the store's own operations on the database (a
   * statement, taking a connection and its BEGIN, the COMMIT). Past it the request fails
   * with `IdempotencyStoreUnavailableError` (HTTP 503, retriable), so a stalled network
   * path or a database that stopped answering costs each request at most this long. The
   * connection stuck past it is destroyed when the adapter was made on a pg Pool
   * (`new PrismaPg(pool)`: the store reaches the pool); otherwise (an adapter made on a
   * configuration, MySQL / MariaDB) it is left to the driver, and the error says so.
   * A duplicate that waits longer than this for a first transaction (`waitTimeout`
   * undefined) also gets the 503. `0`: no deadline. Not applied on SQLite.
   * @default 4_000 (a request stalled on its claim then gets its 503 within 5 s end to end)
   */
  statementTimeout?: number;
  /**
   * Isolation of the transaction (see the TypeORM store's option of the same name: a
   * duplicate still replays under the stricter levels).
   * @default 'READ COMMITTED' on PostgreSQL; the server's own on MySQL and MariaDB
   */
  isolationLevel?: IdempotentIsolationLevel;
}

/** Options of `PrismaIdempotencyStore`. */
export interface PrismaIdempotencyStoreOptions extends PrismaTransactionTuning {
  /**
   * Records table, `'table'` or `'schema.table'` (the steps live in `<table>_steps`).
   * @default 'idempotency_records'
   */
  tableName?: string;
  /**
   * The database behind the client. Read from the generated client (its schema's
   * `provider`) when not given; give it for a client that does not say.
   * @default the client's provider
   */
  provider?: PrismaProvider;
  /**
   * The largest result the store must hold, in bytes of serialized outcome (on MySQL /
   * MariaDB `verify()` refuses at boot a `result` column or `max_allowed_packet` too small
   * for it; a result that can never be stored is stored as "not storable").
   * @default 1_048_576 (the module's default maxResponseBytes)
   */
  maxResponseBytes?: number;
  /**
   * Runs `purgeExpired()` every this many ms in the background (the timer does not keep
   * the process alive), once the store is known to work. Several instances may enable it:
   * an advisory lock lets one purge at a time. `undefined` or 0: off.
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
   * Called when a scheduled purge fails (the job keeps running).
   * @default a rate-limited warning through Nest's Logger when no event listener is registered
   */
  onPurgeError?: (error: unknown) => void;
  /**
   * Where a failed background purge is written when nobody else reports it.
   * @default new Logger('Idempotency')
   */
  logger?: LoggerService;
}
