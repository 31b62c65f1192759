import { AsyncLocalStorage } from 'node:async_hooks';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';

/** The transaction a `runIdempotentTransaction` callback or transactional handler runs in. */
export interface IdempotentTransactionContext {
  readonly dataSource: DataSource;
  readonly queryRunner: QueryRunner;
  readonly manager: EntityManager;
}

/**
 * @internal Registered on a global symbol, so that the ESM and CommonJS copies of this
 * package (both may load in one process) share the transaction a handler runs in.
 */
export const transactionContext: AsyncLocalStorage<IdempotentTransactionContext> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for('nestjs-idempotency:typeorm:transaction')
] ??= new AsyncLocalStorage<IdempotentTransactionContext>()) as AsyncLocalStorage<IdempotentTransactionContext>;

/**
 * The `EntityManager` of the idempotent transaction running around the caller: inside
 * a handler decorated with `@Idempotent({ transactional: true })` (with the
 * `TypeOrmIdempotencyStore`), or inside a `runIdempotentTransaction` callback. Writes made
 * through it commit together with the idempotency record, or not at all. The same name as
 * on the Prisma and Drizzle entry points.
 *
 * Throws `IdempotencyConfigurationError` anywhere else.
 */
export function getIdempotentTransaction(): EntityManager {
  const context = transactionContext.getStore();
  if (!context) {
    throw new IdempotencyConfigurationError(
      'getIdempotentTransaction() was called outside an idempotent transaction.',
      'Call it only while a handler decorated with @Idempotent({ transactional: true }) runs (the module must use TypeOrmIdempotencyStore), or inside the callback of runIdempotentTransaction(), which also receives the manager as its argument.',
    );
  }
  return context.manager;
}

/** Like `getIdempotentTransaction()`, but `undefined` outside an idempotent transaction. */
export function findIdempotentTransaction(): EntityManager | undefined {
  return transactionContext.getStore()?.manager;
}

/**
 * The `EntityManager` of the idempotent transaction running around the caller.
 * @deprecated use `getIdempotentTransaction()`, the same function under the name every ORM entry point shares.
 */
export function getIdempotentEntityManager(): EntityManager {
  return getIdempotentTransaction();
}

/**
 * Like `getIdempotentEntityManager()`, but `undefined` outside an idempotent transaction.
 * @deprecated use `findIdempotentTransaction()`, the same function under the name every ORM entry point shares.
 */
export function findIdempotentEntityManager(): EntityManager | undefined {
  return findIdempotentTransaction();
}
