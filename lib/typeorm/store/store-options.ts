import type { LoggerService } from '@nestjs/common';
import type { PurgeResult } from '../../sql/purge-schedule.js';
import type { TransactionTuning } from './transaction.js';

/** Options of `TypeOrmIdempotencyStore`. */
export interface TypeOrmIdempotencyStoreOptions extends TransactionTuning {
  /**
   * Records table, `'table'` or `'schema.table'`. An unqualified name lives in the
   * DataSource's `schema` on PostgreSQL, like TypeORM's own entities.
   * @default 'idempotency_records'
   */
  tableName?: string;
  /**
   * A records entity registered in the DataSource (e.g. from `createIdempotencyRecordEntity`):
   * its table is used, so entity and store cannot disagree. Takes precedence over `tableName`.
   * @default undefined
   */
  entity?: Function;
  /**
   * The largest result the store must hold, in bytes of serialized outcome: the largest
   * `maxResponseBytes` of the module and of the handlers that use this store. On MySQL /
   * MariaDB `verify()` refuses, at boot, a `result` column or a server `max_allowed_packet`
   * too small for it. Whatever it says, a result that the table or server can never take is
   * stored as "not storable" (reported once as `response_not_storable`; duplicates get a
   * not-replayable error), never retried until its lease is lost.
   * @default 1_048_576 (the module's default maxResponseBytes)
   */
  maxResponseBytes?: number;
  /**
   * @deprecated use maxResponseBytes (the same limit under the module's name; this alias
   * goes in 1.0). Both given with different values is refused.
   * @default 1_048_576
   */
  maxResultBytes?: number;
  /**
   * Runs `purgeExpired()` every this many ms in the background (the timer does not keep
   * the process alive), from the moment the store is known to work: after `verify()`,
   * `ensureTable()` or its first successful statement. Several instances may enable it:
   * on PostgreSQL and MySQL / MariaDB an advisory lock lets one purge at a time and the others skip that
   * round. `undefined` or 0: off.
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
   * @default a warning through Nest's Logger (context `Idempotency`, one line per cause
   * per 10 s) when no event listener is registered; the module's listeners log it otherwise
   */
  onPurgeError?: (error: unknown) => void;
  /**
   * Where a failed background purge is written when nobody else reports it (see `onPurgeError`).
   * @default new Logger('Idempotency')
   */
  logger?: LoggerService;
}

export type { PurgeResult } from '../../sql/purge-schedule.js';
