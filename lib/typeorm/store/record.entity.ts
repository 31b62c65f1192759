import { Column, Entity, Index, PrimaryColumn, type ValueTransformer } from 'typeorm';
import { mapColumnOnMysql } from '../column-types.js';
import { DEFAULT_RECORDS_TABLE, expiryIndexNameOf, parseTableName, primaryKeyNameOf } from '../../sql/dialects/records-table.js';

/** PostgreSQL returns bigint as a string; epoch ms fit a JS number exactly. */
const epochMs: ValueTransformer = {
  to: (value: unknown) => value,
  from: (value: unknown) => (value === null || value === undefined ? value : Number(value)),
};

/** The shape of a row of the idempotency records table. */
export interface IdempotencyRecordRow {
  /** Scoped SHA-256 of the client key (never the raw key). */
  key: string;
  /** `'in_progress'` (a lease) or `'completed'`. */
  status: 'in_progress' | 'completed';
  /** Token of the lease owner; null once completed. */
  leaseToken: string | null;
  /** Lease end, epoch ms; null once completed. */
  leaseExpiresAt: number | null;
  fingerprint: string | null;
  /** Serialized outcome to replay; null while in progress. */
  result: string | null;
  /** When the row stops counting, epoch ms: the lease end while in progress, the retention end once completed. */
  expiresAt: number;
  /** When the current lease was taken, epoch ms. */
  createdAt: number;
}

/** A class mapped to an idempotency records table (see `createIdempotencyRecordEntity`). */
export type IdempotencyRecordEntityClass = new () => IdempotencyRecordRow;

/** Applies the column, index and table decorators to `target`; one source of truth for every records entity. */
function mapRecordEntity(target: IdempotencyRecordEntityClass, tableName: string): void {
  const { schema, table } = parseTableName(tableName);
  const proto = target.prototype as object;
  PrimaryColumn({ name: 'key', type: 'varchar', length: 255, primaryKeyConstraintName: primaryKeyNameOf(table) })(proto, 'key');
  Column({ name: 'status', type: 'varchar', length: 16 })(proto, 'status');
  Column({ name: 'lease_token', type: 'varchar', length: 255, nullable: true })(proto, 'leaseToken');
  Column({ name: 'lease_expires_at', type: 'bigint', nullable: true, transformer: epochMs })(proto, 'leaseExpiresAt');
  Column({ name: 'fingerprint', type: 'varchar', length: 255, nullable: true })(proto, 'fingerprint');
  Column({ name: 'result', type: 'text', nullable: true })(proto, 'result');
  Column({ name: 'expires_at', type: 'bigint', transformer: epochMs })(proto, 'expiresAt');
  Column({ name: 'created_at', type: 'bigint', transformer: epochMs })(proto, 'createdAt');
  Index(expiryIndexNameOf(table), ['expiresAt'])(target);
  Entity({ name: table, ...(schema ? { schema } : {}) })(target);
  // MySQL / MariaDB: what the migration makes there. TEXT holds 64 KB, under the default
  // maxResponseBytes (1 MiB); MEDIUMTEXT holds 16 MiB. The server's default collation
  // usually ignores case, and keys and lease tokens differ by case (they never end in a
  // space, so PAD SPACE utf8mb4_bin is exact for them).
  mapColumnOnMysql(target, 'result', { type: 'mediumtext', collation: 'binary' });
  for (const property of ['key', 'status', 'leaseToken', 'fingerprint']) mapColumnOnMysql(target, property, { collation: 'binary' });
}

/**
 * The TypeORM entity of the default records table, `idempotency_records`. The store itself
 * speaks plain SQL and does not need the entity to be registered.
 *
 * On every database the columns are those the migration makes: on MySQL and MariaDB
 * `result` is MEDIUMTEXT (16 MiB; TEXT would hold 64 KB) and the text columns are
 * binary-collated (`utf8mb4_bin`), whatever the server's default collation. A table made
 * from an older version of the entity (`result TEXT`) is refused by the store's `verify()`
 * at boot, with the ALTER TABLE statement that fixes it (see docs/typeorm.md).
 *
 * @deprecated register `...idempotencyEntities` instead (this entity, and every other table
 * the installed version needs: a version that adds a table then needs no change to your code).
 */
export class IdempotencyRecordEntity implements IdempotencyRecordRow {
  key!: string;
  status!: 'in_progress' | 'completed';
  leaseToken!: string | null;
  leaseExpiresAt!: number | null;
  fingerprint!: string | null;
  result!: string | null;
  expiresAt!: number;
  createdAt!: number;
}
mapRecordEntity(IdempotencyRecordEntity, DEFAULT_RECORDS_TABLE);

/**
 * A records entity for another table name (`'table'` or `'schema.table'`): TypeORM binds
 * a table name to a class when it is decorated, so each table needs its own class.
 * Pass the same name as the store's `tableName` (or pass this class as its `entity`).
 *
 * Call it once per table at module level, not per request.
 *
 * @example
 * export const PaymentIdempotencyRecord = createIdempotencyRecordEntity('payments.idempotency_records');
 * new TypeOrmIdempotencyStore(dataSource, { entity: PaymentIdempotencyRecord });
 *
 * @deprecated use `createIdempotencyEntities({ tableName })` (this entity and every other
 * table of that name) and pass the same `tableName` to the store.
 */
export function createIdempotencyRecordEntity(tableName: string): IdempotencyRecordEntityClass {
  const { table } = parseTableName(tableName);
  const named = {
    // A distinct, readable class name per table (TypeORM and error messages show it).
    [`IdempotencyRecord_${table}`]: class implements IdempotencyRecordRow {
      key!: string;
      status!: 'in_progress' | 'completed';
      leaseToken!: string | null;
      leaseExpiresAt!: number | null;
      fingerprint!: string | null;
      result!: string | null;
      expiresAt!: number;
      createdAt!: number;
    },
  };
  const target = named[`IdempotencyRecord_${table}`];
  mapRecordEntity(target, tableName);
  return target;
}
