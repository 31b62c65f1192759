/**
 * `nestjs-idempotency/typeorm`: the PostgreSQL / MySQL / MariaDB / SQLite record store,
 * exactly-once transactions, entity base classes, optimistic locking and state machines.
 * Needs the optional peer dependency `typeorm` (and `pg`, `mysql2` or a SQLite driver).
 */

// The record store and its transaction path (store/).
export { TypeOrmIdempotencyStore } from './store/store.js';
export type { TypeOrmIdempotencyStoreOptions, PurgeResult } from './store/store-options.js';
// The store that opens and closes a DataSource of its own, from a URL.
export { createTypeOrmIdempotencyStore, type OwnedTypeOrmIdempotencyStoreOptions, type OwnedTypeOrmDatabaseType } from './owned-store.js';
export type { StoreRequirements } from '../core/store.js';
export type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../core/outbox-store.js';
export {
  runIdempotentTransaction,
  executeIdempotentTransaction,
  type IdempotentTransactionOptions,
  type IdempotentTransactionResult,
} from './store/idempotent-transaction.js';
export type { IdempotentIsolationLevel, TransactionTuning } from './store/transaction.js';
export {
  getIdempotentTransaction,
  findIdempotentTransaction,
  // Deprecated: the same functions under the TypeORM-only name.
  getIdempotentEntityManager,
  findIdempotentEntityManager,
} from './store/transaction-context.js';
// The tables: one entities array and one migration for whatever tables the installed version needs.
export {
  idempotencyEntities,
  createIdempotencyEntities,
  type IdempotencyEntityClass,
  type IdempotencyEntitiesOptions,
} from './store/entities.js';
export {
  CreateIdempotencyTables1700000000000,
  createIdempotencyTablesMigration,
  type IdempotencyTablesMigrationOptions,
} from './store/tables-migration.js';
// Deprecated: one entity or migration per table (a new table needed a change to the application).
export { IdempotencyRecordEntity, createIdempotencyRecordEntity, type IdempotencyRecordEntityClass } from './store/record.entity.js';
export { IdempotencyStepEntity, createIdempotencyStepEntity, type IdempotencyStepRow } from './store/step.entity.js';
export {
  CreateIdempotencyRecords1700000000000,
  createIdempotencyRecordsMigration,
  AddIdempotencySteps1720000000000,
  createIdempotencyStepsMigration,
  type IdempotencyRecordsMigrationOptions,
} from './store/migration.js';
export { AddIdempotencyOutbox1730000000000, createIdempotencyOutboxMigration } from './store/outbox-migration.js';
export { recordsTableDdl, stepsTableDdl } from './store/dialects/registry.js';
export { parseTableName, type TableName } from './store/dialects/records-table.js';

// The patterns for your own entities (patterns/).
export { VersionedEntity, IdempotentEntity } from './patterns/entities.js';
export {
  updateWithVersion,
  retryOnOptimisticLock,
  isOptimisticLockConflict,
  type RetryOnOptimisticLockOptions,
  type EntityChanges,
  type EntityId,
} from './patterns/optimistic-lock.js';
export {
  insertOrGet,
  insertOrGetExisting, // deprecated: insertOrGet(...).entity
  idemKeyIndexNameOf,
  type InsertOrGetOptions,
  type InsertOrGetResult,
} from './patterns/insert-or-get.js';
export { isUniqueViolation } from './patterns/unique-violation.js';
// The same list the /state-machine entry point offers (with IllegalStateTransitionError).
export * from '../state-machine/state-machine.js';
export { applyTransition, type ApplyTransitionOptions, type TransitionOutcome } from './patterns/state-transition.js';
export { OptimisticLockError } from './patterns/errors.js';
