import { DEFAULT_TTL } from '../core/defaults.js';
import { replayValue } from '../core/engine.js';
import { IdempotencyConfigurationError } from '../core/errors.js';
import type { IdempotencyEventListener } from '../core/events.js';
import { fingerprintOf, storageKeyOf } from '../core/hash.js';
import { normalizeIdempotencyKey } from '../core/key.js';
import { checkWholeNumber } from '../core/options.js';
import { deserializeOutcome, serializeOutcome, valueOutcome } from '../core/outcome.js';
import type { TransactionalRequest } from '../core/store.js';
import { runRecordTransaction } from '../sql/transaction.js';
import type { PrismaClientLike, PrismaProvider, TransactionClientOf } from './prisma-client.js';
import { checkOptions, prismaDatabaseOf, prismaDialect, prismaProviderOf, prismaTransactionParts } from './store.js';
import type { PrismaTransactionTuning } from './store-options.js';
import { PRISMA_TABLE_FIXES } from './table-fixes.js';

/** Options of `runIdempotentTransaction`: the key, its scope and fingerprint, and the transaction's tuning. */
export interface IdempotentTransactionOptions extends PrismaTransactionTuning {
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
   * The database behind the client (see `PrismaIdempotencyStoreOptions.provider`).
   * @default the client's provider
   */
  provider?: PrismaProvider;
  /**
   * Hears what the transaction met and dealt with by itself (MySQL / MariaDB: each InnoDB
   * deadlock or lock wait timeout after which it ran again, as a `store_error` event).
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
 * Exactly-once work on PostgreSQL or MySQL / MariaDB through Prisma: runs `work` in ONE
 * interactive `prisma.$transaction` that first writes the idempotency record, so the
 * writes made through `tx` and the stored result commit together. A concurrent duplicate
 * waits for that commit and gets the stored result; an error or a crash before commit
 * leaves no trace, so a retry runs cleanly. Duplicates get a faithful copy of the result
 * (Date, Map, Set, bigint, Buffer come back as themselves).
 *
 * Do every write of the work through `tx` (or `getIdempotentTransaction()`): writes
 * through `prisma` run outside the transaction.
 *
 * @example
 * const refund = await runIdempotentTransaction(prisma, { key: message.id, fingerprint: message.body }, async (tx) => {
 *   await tx.account.update({ where: { id: accountId }, data: { balance: { decrement: amount } } });
 *   return { refunded: amount };
 * });
 */
export async function runIdempotentTransaction<C extends PrismaClientLike, T>(
  prisma: C,
  options: IdempotentTransactionOptions,
  work: (tx: TransactionClientOf<C>) => Promise<T>,
): Promise<T> {
  return (await executeIdempotentTransaction(prisma, options, work)).value;
}

/** `runIdempotentTransaction` that also tells whether the result was replayed. */
export async function executeIdempotentTransaction<C extends PrismaClientLike, T>(
  prisma: C,
  options: IdempotentTransactionOptions,
  work: (tx: TransactionClientOf<C>) => Promise<T>,
): Promise<IdempotentTransactionResult<T>> {
  if (!options || options.key === undefined || options.key === null) {
    throw new IdempotencyConfigurationError(
      'runIdempotentTransaction needs a key.',
      'Pass { key: message.id } (a string unique per operation).',
    );
  }
  checkWholeNumber('runIdempotentTransaction', 'ttl', options.ttl, { unit: 'ms', example: '86_400_000' });
  checkOptions('runIdempotentTransaction', options);
  const request: TransactionalRequest = {
    key: storageKeyOf(options.scope ?? 'transaction', normalizeIdempotencyKey(options.key)),
    fingerprint: options.fingerprint === undefined ? undefined : fingerprintOf(options.fingerprint),
    ttl: options.ttl ?? DEFAULT_TTL,
  };
  const provider = prismaProviderOf(prisma, options.provider);
  const db = prismaDatabaseOf(prisma, provider, options);
  const parts = prismaTransactionParts(prisma, db, async (tx) => {
    const value = await work(tx as TransactionClientOf<C>);
    return { value, result: serializeOutcome(valueOutcome(value, 'faithful')) };
  });
  const outcome = await runRecordTransaction({
    db: parts.nested ?? db,
    dialect: prismaDialect(provider, options.tableName),
    request,
    work: parts.work,
    tuning: options,
    nested: parts.nested !== undefined,
    onEvent: options.onEvent,
    owner: 'PrismaIdempotencyStore',
    fixes: PRISMA_TABLE_FIXES,
  });
  if (outcome.kind === 'executed') return { value: outcome.value, replayed: false };
  return { value: replayValue(deserializeOutcome(outcome.result)) as T, replayed: true };
}
