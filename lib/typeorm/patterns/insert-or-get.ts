import type { DataSource, EntityManager, EntityTarget, ObjectLiteral } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { driverFamilyOf } from '../dialect.js';
import { dataSourceOf } from '../internals.js';
import type { EntityChanges } from './optimistic-lock.js';
import { findLatestRow } from './latest-row.js';
import { isUniqueViolation } from './unique-violation.js';

/** Options of `insertOrGet`. */
export interface InsertOrGetOptions {
  /**
   * Property whose unique index identifies a duplicate.
   * @default 'idemKey' (the column `idem_key` of IdempotentEntity)
   */
  by?: string;
}

/** What `insertOrGet` returns: the row, and whether this call inserted it. */
export interface InsertOrGetResult<T> {
  /** The row now in the table: the one just inserted, or the one that was already there. */
  readonly entity: T;
  /** True when this call inserted it. */
  readonly created: boolean;
}

/**
 * Inserts a row; when a row with the same `idemKey` (or `options.by`) already exists,
 * returns that row instead of throwing, with `created: false`. Safe under concurrency:
 * on PostgreSQL and MySQL / MariaDB a duplicate inserted by a transaction that has not
 * committed yet makes this call wait for it; inside your transaction the insert never
 * aborts it. On MySQL / MariaDB inside a transaction the existing row is read with
 * `FOR UPDATE` (a plain read could miss it in an older snapshot), so it stays locked
 * until your transaction ends.
 *
 * A conflict on another unique index (e.g. the primary key) is not a duplicate of the
 * operation: it throws.
 */
export async function insertOrGet<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  values: EntityChanges<T>,
  options: InsertOrGetOptions = {},
): Promise<InsertOrGetResult<T>> {
  const metadata = manager.getRepository(entity).metadata;
  const by = options.by ?? 'idemKey';
  if (!metadata.findColumnWithPropertyPath(by)) {
    throw new IdempotencyConfigurationError(
      `${metadata.name} has no '${by}' column to detect duplicates by.`,
      "Extend IdempotentEntity (column idem_key), or pass { by: 'yourUniqueProperty' }.",
    );
  }
  const keyValue = (values as Record<string, unknown>)[by];
  if (keyValue === undefined || keyValue === null) {
    throw new IdempotencyConfigurationError(
      `insertOrGet: the values for ${metadata.name} lack '${by}'.`,
      `Set ${by} to the operation's idempotency key.`,
    );
  }
  const family = driverFamilyOf(dataSourceOf(manager));
  let created: boolean;
  if (family === 'postgres' || family === 'cockroachdb') {
    // A failed statement would abort the caller's transaction on PostgreSQL, so the
    // duplicate is skipped in SQL (ON CONFLICT DO NOTHING) instead of caught.
    const primary = metadata.primaryColumns.map((column) => column.databaseName);
    const result = await manager
      .createQueryBuilder()
      .insert()
      .into(entity)
      .values(values)
      .orIgnore()
      .returning(primary)
      .updateEntity(false)
      .execute();
    created = Array.isArray(result.raw) && result.raw.length > 0;
  } else {
    // SQLite, MySQL and MariaDB roll back only the failed statement, never the transaction.
    try {
      await manager.createQueryBuilder().insert().into(entity).values(values).updateEntity(false).execute();
      created = true;
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      created = false;
    }
  }
  // MySQL: the duplicate may have been committed after this transaction's snapshot (the
  // insert waited for it), so it is read with a locking read that sees it.
  const row = await findLatestRow(manager, entity, { [by]: keyValue } as never);
  if (!row) {
    throw new IdempotencyConfigurationError(
      `Inserting ${metadata.name} conflicted with a unique index other than '${by}', and no row has that ${by}.`,
      'Check the other unique columns (e.g. the primary key) of the values you insert.',
    );
  }
  const found = (row as Record<string, unknown>)[by];
  if (typeof keyValue === 'string' && typeof found === 'string' && found !== keyValue) {
    // The unique index took two keys for one (a collation that ignores case, accents or
    // trailing spaces): the row is another operation's, and returning it would replay it.
    const column = metadata.findColumnWithPropertyPath(by)!.databaseName;
    throw new IdempotencyConfigurationError(
      `insertOrGet: the column ${column} of ${metadata.tablePath} compares ${JSON.stringify(keyValue)} equal to another key, ` +
        `${JSON.stringify(found)}; the existing row is another operation's.`,
      `Make the column compare exactly. MariaDB: ALTER TABLE \`${metadata.tableName}\` MODIFY \`${column}\` varchar(255) ` +
        `CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL; MySQL 8: the same with COLLATE utf8mb4_0900_bin ` +
        '(utf8mb4_bin still ignores trailing spaces). See docs/entity-patterns.md, "Keys compare exactly".',
    );
  }
  return { entity: row, created };
}

/**
 * Inserts a row, or returns the existing one with the same `idemKey` instead of throwing
 * on the duplicate (see `insertOrGet`, which also tells which happened).
 *
 * @deprecated use `insertOrGet(...)`, whose `entity` is this row (and `created` tells whether
 * this call inserted it): `const { entity } = await insertOrGet(manager, RefundRecord, values)`.
 */
export async function insertOrGetExisting<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  values: EntityChanges<T>,
  options: InsertOrGetOptions = {},
): Promise<T> {
  return (await insertOrGet(manager, entity, values, options)).entity;
}

/**
 * Name of the unique index on `idem_key` of an `IdempotentEntity` subclass (it comes from
 * the naming strategy), e.g. to match `error.constraint` or write a migration.
 */
export function idemKeyIndexNameOf(dataSource: DataSource, entity: EntityTarget<ObjectLiteral>, property = 'idemKey'): string {
  const metadata = dataSource.getMetadata(entity);
  const index = metadata.indices.find(
    (candidate) => candidate.isUnique && candidate.columns.length === 1 && candidate.columns[0].propertyPath === property,
  );
  if (!index) {
    throw new IdempotencyConfigurationError(
      `${metadata.name} has no unique index on '${property}'.`,
      'Extend IdempotentEntity, or declare @Index({ unique: true }) on the property.',
    );
  }
  return index.name;
}
