/**
 * `nestjs-idempotency/drizzle`: the PostgreSQL / MySQL / MariaDB record store on a Drizzle
 * database (drizzle-orm on node-postgres or mysql2), exactly-once transactions, the tables
 * as Drizzle definitions for your schema (drizzle-kit), and optimistic locking. Needs the
 * optional peer dependency `drizzle-orm` (and `pg` or `mysql2`); nothing else of this
 * package loads it.
 */

// The record store and its transaction path.
export { DrizzleIdempotencyStore } from './store.js';
export type { DrizzleIdempotencyStoreOptions, DrizzleTransactionTuning, PurgeResult } from './store-options.js';
// The store that opens and ends a pool of its own, from a URL.
export { createDrizzleIdempotencyStore, type OwnedDrizzleIdempotencyStoreOptions, type OwnedDrizzleDialect } from './owned-store.js';
export type { StoreRequirements } from '../core/store.js';
export type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../core/outbox-store.js';
export type { IdempotentIsolationLevel } from '../sql/port.js';
export {
  runIdempotentTransaction,
  executeIdempotentTransaction,
  type IdempotentTransactionOptions,
  type IdempotentTransactionResult,
} from './idempotent-transaction.js';
export { getIdempotentTransaction, findIdempotentTransaction, type DrizzleTransactionOf } from './transaction-context.js';

// Every table of the store, for your Drizzle schema (drizzle-kit generates them with your own
// tables); idempotencyRecords*/idempotencySteps* are deprecated (one table each).
export { idempotencyPgTables, idempotencyRecordsPg, idempotencyStepsPg } from './pg-tables.js';
export { idempotencyMysqlTables, idempotencyRecordsMysql, idempotencyStepsMysql } from './mysql-tables.js';

// Optimistic locking for your own tables.
export {
  updateWithVersion,
  retryOnOptimisticLock,
  isOptimisticLockConflict,
  OptimisticLockError,
  type DrizzleRowId,
  type UpdateWithVersionOptions,
  type RetryOnOptimisticLockOptions,
} from './optimistic-lock.js';
