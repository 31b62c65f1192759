import { Column, Index, VersionColumn } from 'typeorm';
import { mapColumnOnMysql } from '../column-types.js';

/**
 * Base class for entities updated concurrently: a `version` column TypeORM sets to 1 on
 * insert and increments on every `save()`. `save()` does not CHECK the version, though:
 * use `updateWithVersion()` (or `applyTransition()`) for a write that fails with
 * `OptimisticLockError` when someone else updated the row since you read it.
 *
 * @example
 * @Entity('accounts')
 * export class Account extends VersionedEntity {
 *   @PrimaryGeneratedColumn() id: number;
 *   @Column('int') balance: number;
 * }
 */
export abstract class VersionedEntity {
  @VersionColumn({ name: 'version', type: 'int' })
  version!: number;
}

/**
 * Base class for rows that an operation creates exactly once, e.g. a refund per refund
 * message: `idemKey` (column `idem_key`) carries the operation's idempotency key under a
 * unique index, the last line of defence when everything else let a duplicate through.
 * Insert with `insertOrGetExisting()` to get the existing row back instead of an error.
 *
 * The unique index is named by your naming strategy from the table and column
 * (TypeORM's default: `IDX_` + a hash), so it is unique per table:
 * `idemKeyIndexNameOf(dataSource, Entity)` tells the name. A literal name on this shared
 * base class would collide on the second table, as PostgreSQL and SQLite index names are
 * per schema.
 *
 * Keys compare exactly, byte for byte, on every database: `evt_1AbC`, `evt_1abc`,
 * `evt_1AbC ` and `ÉVT` / `EVT` are four keys. PostgreSQL and SQLite compare `varchar`
 * that way already; on MySQL and MariaDB the column is created with a binary NO PAD
 * collation (`utf8mb4_nopad_bin` on MariaDB, `utf8mb4_0900_bin` on MySQL 8), since the
 * server's default (`utf8mb4_general_ci`) ignores case, accents and trailing spaces.
 * A column made before (TypeORM's schema sync does not change the collation of an existing
 * column) needs the ALTER TABLE of docs/entity-patterns.md; until then `insertOrGet()`
 * refuses a key that the column confuses with another instead of returning the other row.
 *
 * @example
 * @Entity('refund_records')
 * export class RefundRecord extends IdempotentEntity {
 *   @PrimaryGeneratedColumn() id: number;
 *   @Column('int') amount: number;
 * }
 */
export abstract class IdempotentEntity extends VersionedEntity {
  @Index({ unique: true })
  @Column({ name: 'idem_key', type: 'varchar', length: 255 })
  idemKey!: string;
}
mapColumnOnMysql(IdempotentEntity, 'idemKey', { collation: 'exact' });
