/**
 * `nestjs-idempotency/prisma`: the PostgreSQL / MySQL / MariaDB record store on a
 * PrismaClient (Prisma 7, driver adapters), exactly-once interactive transactions,
 * optimistic locking and state transitions. Needs the optional peer `@prisma/client`
 * (and a driver adapter); nothing of it is imported here: the client is taken structurally.
 */
export { PrismaIdempotencyStore } from './store.js';
export type { PrismaIdempotencyStoreOptions, PrismaTransactionTuning, PurgeResult } from './store-options.js';
export type { StoreRequirements } from '../core/store.js';
export type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../core/outbox-store.js';
export type { IdempotentIsolationLevel } from '../sql/port.js';
export {
  runIdempotentTransaction,
  executeIdempotentTransaction,
  type IdempotentTransactionOptions,
  type IdempotentTransactionResult,
} from './idempotent-transaction.js';
export { getIdempotentTransaction, findIdempotentTransaction } from './transaction-context.js';
export { prismaIdempotencyMigrationSql } from './migration.js';
export type {
  PrismaClientLike,
  PrismaTransactionClientLike,
  PrismaTransactionOptions,
  PrismaProvider,
  TransactionClientOf,
} from './prisma-client.js';
export {
  updateWithVersion,
  applyTransition,
  type PrismaModelLike,
  type UpdateWithVersionOptions,
  type ApplyTransitionOptions,
  type TransitionOutcome,
} from './optimistic-lock.js';
export { OptimisticLockError } from '../typeorm/patterns/errors.js';
export { retryOnOptimisticLock, isOptimisticLockConflict, type RetryOnOptimisticLockOptions } from '../typeorm/patterns/optimistic-lock.js';
export * from '../state-machine/state-machine.js';
