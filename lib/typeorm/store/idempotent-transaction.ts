import type { DataSource, EntityManager } from 'typeorm';
import { DEFAULT_TTL } from '../../core/defaults.js';
import { replayValue } from '../../core/engine.js';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import type { IdempotencyEventListener } from '../../core/events.js';
import { fingerprintOf, storageKeyOf } from '../../core/hash.js';
import { normalizeIdempotencyKey } from '../../core/key.js';
import { checkWholeNumber } from '../../core/options.js';
import { deserializeOutcome, serializeOutcome, valueOutcome } from '../../core/outcome.js';
import type { TransactionalRequest } from '../../core/store.js';
import { dialectFor } from './dialects/registry.js';
import { checkTuning, runRecordTransactionOn, type TransactionTuning } from './transaction.js';

/** Options of `runIdempotentTransaction`: the key, its scope and fingerprint, and the transaction's tuning. */
export interface IdempotentTransactionOptions extends TransactionTuning {
  /** The client's idempotency key (e.g. a message id); hashed with the scope, never stored raw. */
  key: string | number;
  /**
   * Namespace of the keys, so two operations with equal keys stay independent.
   * @default 'transaction'
   */
  scope?: string;
  /** Retention of the stored result, ms. @default 86400000 (24 h) */
  ttl?: number;
  /**
   * What identifies the request (e.g. the message body): hashed with `fingerprintOf`. The
   * same key with other material throws `IdempotencyFingerprintMismatchError`.
   * @default undefined (not checked)
   */
  fingerprint?: unknown;
  /**
   * Records table, `'table'` or `'schema.table'`; must match the store's when both are used.
   * @default 'idempotency_records'
   */
  tableName?: string;
  /**
   * Hears what the transaction met and dealt with by itself: on MySQL and MariaDB, each
   * time InnoDB rolled it back for a deadlock or a lock wait timeout and it ran again
   * (a `store_error` event whose `reason` says so).
   * @default undefined
   */
  onEvent?: IdempotencyEventListener;
}

/** What `executeIdempotentTransaction` returns: the value, and whether it was replayed. */
export interface IdempotentTransactionResult<T> {
  /** The work's return value; on a replay, a faithful copy of the stored value (Date, Map, bigint... as themselves). */
  readonly value: T;
  /** True when this call did not run the work and returned the committed result instead. */
  readonly replayed: boolean;
}

/**
 * Exactly-once work on PostgreSQL, MySQL / MariaDB (or SQLite): runs `work` in ONE transaction that first
 * inserts the idempotency record, so the business writes made through `manager` and the
 * stored result commit together. A concurrent duplicate waits for that commit and gets
 * the stored result; an error or a crash before commit leaves no trace, so a retry runs
 * cleanly. Duplicates get a faithful copy of the result (Date, Map, Set, bigint, Buffer
 * come back as themselves); a result that cannot be copied (a function, a stream) is
 * stored as not replayable, and duplicates get `IdempotencyNotReplayableError`.
 *
 * Do every write of the work through `manager` (or `getIdempotentTransaction()`): writes
 * through the DataSource run outside the transaction, and may wait for a pool connection
 * held by a blocked duplicate.
 *
 * @example
 * const refund = await runIdempotentTransaction(dataSource, { key: message.id, fingerprint: message.body }, async (manager) => {
 *   await manager.insert(RefundRecord, { idemKey: message.id, amount });
 *   await manager.decrement(Account, { id: accountId }, 'balance', amount);
 *   return { refunded: amount };
 * });
 */
export async function runIdempotentTransaction<T>(
  dataSource: DataSource,
  options: IdempotentTransactionOptions,
  work: (manager: EntityManager) => Promise<T>,
): Promise<T> {
  return (await executeIdempotentTransaction(dataSource, options, work)).value;
}

/** `runIdempotentTransaction` that also tells whether the result was replayed. */
export async function executeIdempotentTransaction<T>(
  dataSource: DataSource,
  options: IdempotentTransactionOptions,
  work: (manager: EntityManager) => Promise<T>,
): Promise<IdempotentTransactionResult<T>> {
  if (!options || options.key === undefined || options.key === null) {
    throw new IdempotencyConfigurationError(
      'runIdempotentTransaction needs a key.',
      'Pass { key: message.id } (a string unique per operation).',
    );
  }
  checkWholeNumber('runIdempotentTransaction', 'ttl', options.ttl, { unit: 'ms', example: '86_400_000' });
  checkTuning('runIdempotentTransaction', options);
  const request: TransactionalRequest = {
    key: storageKeyOf(options.scope ?? 'transaction', normalizeIdempotencyKey(options.key)),
    fingerprint: options.fingerprint === undefined ? undefined : fingerprintOf(options.fingerprint),
    ttl: options.ttl ?? DEFAULT_TTL,
  };
  const dialect = dialectFor(dataSource, options.tableName, options.preparedStatements !== false);
  const outcome = await runRecordTransactionOn(
    dataSource,
    dialect,
    request,
    async (manager) => {
      const value = await work(manager);
      return { value, result: serializeOutcome(valueOutcome(value, 'faithful')) };
    },
    options,
    options.onEvent,
  );
  if (outcome.kind === 'executed') return { value: outcome.value, replayed: false };
  return { value: replayValue(deserializeOutcome(outcome.result)) as T, replayed: true };
}
