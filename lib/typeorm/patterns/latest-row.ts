import type { EntityManager, EntityTarget, FindOptionsWhere, ObjectLiteral } from 'typeorm';
import { driverFamilyOf } from '../dialect.js';
import { dataSourceOf } from '../internals.js';

/**
 * The row as the database has it now, to explain a conditional write that found nothing
 * (or a duplicate insert). On MySQL and MariaDB inside a transaction a plain SELECT
 * answers from the transaction's REPEATABLE READ snapshot, which can predate the
 * concurrent commit that made the write miss; a locking read (FOR UPDATE, which both
 * servers accept: MariaDB has no FOR SHARE) reads the latest committed row instead, and
 * keeps it locked until the caller's transaction ends. Elsewhere a plain read already
 * sees the latest commit (PostgreSQL READ COMMITTED, SQLite's single writer).
 * @internal
 */
export async function findLatestRow<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  where: FindOptionsWhere<T>,
): Promise<T | null> {
  const locking = manager.queryRunner?.isTransactionActive === true && driverFamilyOf(dataSourceOf(manager)) === 'mysql';
  return manager.findOne(entity, locking ? { where, lock: { mode: 'pessimistic_write' } } : { where });
}
