import type { EntityManager, EntityMetadata, EntityTarget, ObjectLiteral, UpdateQueryBuilder } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { checkWholeNumber } from '../../core/options.js';
import { dataSourceOf } from '../internals.js';
import { IdempotencyErrorCode } from '../../core/errors.js';
import { OptimisticLockError } from './errors.js';
import { findLatestRow } from './latest-row.js';

/** Column changes by property name, as TypeORM's `UpdateQueryBuilder.set()` takes them. */
export type EntityChanges<T extends ObjectLiteral> = Parameters<UpdateQueryBuilder<T>['set']>[0];

/**
 * A primary key value (single-column key), or an object of primary key properties
 * (composite key), e.g. `42` or `{ tenantId: 't1', id: 42 }`.
 */
export type EntityId = string | number | bigint | Date | Record<string, unknown>;

/** @internal `where` object selecting one row by primary key. */
export function primaryWhere(metadata: EntityMetadata, id: EntityId): Record<string, unknown> {
  const primaries = metadata.primaryColumns;
  if (primaries.length === 0) {
    throw new IdempotencyConfigurationError(
      `${metadata.name} has no primary key.`,
      'Declare a @PrimaryColumn or @PrimaryGeneratedColumn on the entity.',
    );
  }
  const isKeyObject = id !== null && typeof id === 'object' && !(id instanceof Date) && !Buffer.isBuffer(id);
  if (!isKeyObject) {
    if (primaries.length > 1) {
      throw new IdempotencyConfigurationError(
        `${metadata.name} has a composite primary key; a single value cannot identify a row.`,
        `Pass an object with ${primaries.map((c) => c.propertyPath).join(', ')}.`,
      );
    }
    return { [primaries[0].propertyPath]: id };
  }
  const where: Record<string, unknown> = {};
  for (const column of primaries) {
    const value = (id as Record<string, unknown>)[column.propertyPath];
    if (value === undefined) {
      throw new IdempotencyConfigurationError(
        `The id of ${metadata.name} lacks '${column.propertyPath}'.`,
        `Pass every primary key property: ${primaries.map((c) => c.propertyPath).join(', ')}.`,
      );
    }
    where[column.propertyPath] = value;
  }
  return where;
}

/** @internal */
export function versionColumnOf(metadata: EntityMetadata, required: boolean) {
  const column = metadata.versionColumn;
  if (!column && required) {
    throw new IdempotencyConfigurationError(
      `${metadata.name} has no version column, so its updates cannot be checked.`,
      'Extend VersionedEntity (or IdempotentEntity), or add a @VersionColumn() property.',
    );
  }
  return column;
}

/** @internal The row's version now, or `undefined` when the row is gone. */
export async function currentVersion(
  manager: EntityManager,
  metadata: EntityMetadata,
  where: Record<string, unknown>,
): Promise<number | undefined> {
  const row = await findLatestRow(manager, metadata.target as EntityTarget<ObjectLiteral>, where);
  if (!row) return undefined;
  return Number(metadata.versionColumn!.getEntityValue(row));
}

/**
 * Updates one row only if it is still at `expectedVersion`, in ONE conditional statement:
 * `UPDATE ... SET <changes>, version = version + 1 WHERE <id> AND version = :expectedVersion`.
 * Returns the new version. Throws `OptimisticLockError` when no row matched (another
 * writer got there first, or the row is gone): reload and retry, or use
 * `retryOnOptimisticLock`.
 *
 * `changes` uses property names; values may be functions returning SQL (TypeORM's raw
 * expressions). The version in `changes`, if any, is ignored.
 *
 * @example
 * const account = await manager.findOneByOrFail(Account, { id });
 * await updateWithVersion(manager, Account, id, account.version, { balance: account.balance - 10 });
 */
export async function updateWithVersion<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  id: EntityId,
  expectedVersion: number,
  changes: EntityChanges<T>,
): Promise<number> {
  const metadata = manager.getRepository(entity).metadata;
  const version = versionColumnOf(metadata, true)!;
  if (!Number.isInteger(expectedVersion)) {
    throw new IdempotencyConfigurationError(
      `updateWithVersion: expectedVersion must be an integer, got ${expectedVersion}.`,
      'Pass the version property of the entity you read.',
    );
  }
  const where = primaryWhere(metadata, id);
  const qb = manager.createQueryBuilder().update(entity);
  const set: Record<string, unknown> = { ...(changes as Record<string, unknown>) };
  set[version.propertyPath] = () => `${qb.escape(version.databaseName)} + 1`;
  const result = await qb
    .set(set as EntityChanges<T>)
    .where({ ...where, [version.propertyPath]: expectedVersion })
    .execute();
  if (result.affected === undefined) {
    throw new IdempotencyConfigurationError(
      `The ${dataSourceOf(manager).options.type} driver does not report affected rows.`,
      'Use PostgreSQL, MySQL / MariaDB or SQLite.',
    );
  }
  if (result.affected > 0) return expectedVersion + 1;
  throw new OptimisticLockError(metadata.name, id, expectedVersion, await currentVersion(manager, metadata, where));
}

/** Options of `retryOnOptimisticLock`. */
export interface RetryOnOptimisticLockOptions {
  /**
   * Attempts after the first one.
   * @default 3
   */
  retries?: number;
  /**
   * Delay before retry `n` (0-based), ms. A number is the base of an exponential backoff
   * with full jitter: a random delay in [0, backoff × 2^n). A function returns the delay.
   * @default 10
   */
  backoff?: number | ((attempt: number) => number);
  /**
   * Which errors to retry.
   * @default isOptimisticLockConflict
   */
  retryIf?: (error: unknown) => boolean;
}

/**
 * True for an `OptimisticLockError` (also from another copy of this package) and for
 * TypeORM's own `OptimisticLockVersionMismatchError`.
 */
export function isOptimisticLockConflict(error: unknown): boolean {
  if (error instanceof OptimisticLockError) return true;
  const candidate = error as { code?: unknown; name?: unknown } | null;
  return candidate?.code === IdempotencyErrorCode.OptimisticLock || candidate?.name === 'OptimisticLockVersionMismatchError';
}

/**
 * Runs `fn` again when it fails with an optimistic lock conflict: `fn` must re-read the
 * row and re-apply its change each time (it receives the attempt number, 0 first).
 * Other errors, and the conflict after the last retry, are thrown.
 *
 * @example
 * await retryOnOptimisticLock(async () => {
 *   const account = await manager.findOneByOrFail(Account, { id });
 *   await updateWithVersion(manager, Account, id, account.version, { balance: account.balance + 5 });
 * }, { retries: 5 });
 */
export async function retryOnOptimisticLock<T>(
  fn: (attempt: number) => Promise<T>,
  options: RetryOnOptimisticLockOptions = {},
): Promise<T> {
  checkWholeNumber('retryOnOptimisticLock', 'retries', options.retries, { min: 0, example: '5' });
  if (typeof options.backoff !== 'function') {
    checkWholeNumber('retryOnOptimisticLock', 'backoff', options.backoff, { unit: 'ms', min: 0, example: '10' });
  }
  const retries = options.retries ?? 3;
  const backoff = options.backoff ?? 10;
  const retryIf = options.retryIf ?? isOptimisticLockConflict;
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      if (attempt >= retries || !retryIf(error)) throw error;
      const delay = typeof backoff === 'function' ? backoff(attempt) : Math.random() * backoff * 2 ** attempt;
      if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
