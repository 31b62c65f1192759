/**
 * `nestjs-idempotency/typeorm`: the PostgreSQL / SQLite record store, exactly-once
 * transactions, entity base classes, optimistic locking and state machines.
 * Needs the optional peer dependency `typeorm` (and `pg` or a SQLite driver).
 */
export { TypeOrmIdempotencyStore, type TypeOrmIdempotencyStoreOptions, type PurgeResult } from './store.js';
export {
  runIdempotentTransaction,
  executeIdempotentTransaction,
  type IdempotentTransactionOptions,
  type IdempotentTransactionResult,
  type IdempotentIsolationLevel,
  type TransactionTuning,
} from './transaction.js';
export { getIdempotentEntityManager, findIdempotentEntityManager } from './sql-runner.js';
export {
  IdempotencyRecordEntity,
  createIdempotencyRecordEntity,
  type IdempotencyRecordRow,
  type IdempotencyRecordEntityClass,
} from './record.entity.js';
export {
  CreateIdempotencyRecords1700000000000,
  createIdempotencyRecordsMigration,
  type IdempotencyRecordsMigrationOptions,
} from './migration.js';
export { recordsTableDdl, parseTableName, DEFAULT_RECORDS_TABLE, type TableName } from './record-sql.js';
export { VersionedEntity, IdempotentEntity } from './entities.js';
export {
  updateWithVersion,
  retryOnOptimisticLock,
  isOptimisticLockConflict,
  type RetryOnOptimisticLockOptions,
  type EntityChanges,
  type EntityId,
} from './optimistic-lock.js';
export { insertOrGetExisting, insertOrGet, idemKeyIndexNameOf, type InsertOrGetOptions, type InsertOrGetResult } from './insert-or-get.js';
export { isUniqueViolation } from './unique-violation.js';
export {
  defineStateMachine,
  type StateMachine,
  type StateMachineOptions,
  type StateOf,
  type TransitionTable,
  type TransitionDecision,
} from './state-machine.js';
export { applyTransition, type ApplyTransitionOptions, type TransitionOutcome } from './state-transition.js';
export { OptimisticLockError, IllegalStateTransitionError, TypeOrmIdempotencyErrorCode } from './errors.js';
