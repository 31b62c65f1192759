import { AsyncLocalStorage } from 'node:async_hooks';
import { IdempotencyConfigurationError } from '../core/errors.js';
import type { PrismaTransactionClientLike } from './prisma-client.js';

/** The transaction a `runIdempotentTransaction` callback or transactional handler runs in. */
export interface PrismaTransactionContext {
  /** The PrismaClient the transaction was opened on. */
  readonly client: object;
  /** The interactive transaction's client. */
  readonly tx: PrismaTransactionClientLike;
}

/**
 * @internal Registered on a global symbol, so that the ESM and CommonJS copies of this
 * package (both may load in one process) share the transaction a handler runs in.
 */
export const prismaTransactionContext: AsyncLocalStorage<PrismaTransactionContext> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for('nestjs-idempotency:prisma:transaction')
] ??= new AsyncLocalStorage<PrismaTransactionContext>()) as AsyncLocalStorage<PrismaTransactionContext>;

/**
 * The transaction client of the idempotent transaction running around the caller: inside
 * a handler decorated with `@Idempotent({ transactional: true })` (with the
 * `PrismaIdempotencyStore`), or inside a `runIdempotentTransaction` callback. Writes made
 * through it commit together with the idempotency record, or not at all. Name your
 * client's transaction type: `getIdempotentTransaction<Prisma.TransactionClient>()`.
 *
 * Throws `IdempotencyConfigurationError` anywhere else.
 */
export function getIdempotentTransaction<Tx = PrismaTransactionClientLike>(): Tx {
  const context = prismaTransactionContext.getStore();
  if (!context) {
    throw new IdempotencyConfigurationError(
      'getIdempotentTransaction() was called outside an idempotent transaction.',
      'Call it only while a handler decorated with @Idempotent({ transactional: true }) runs (the module must use PrismaIdempotencyStore), or inside the callback of runIdempotentTransaction(), which also receives the transaction client as its argument.',
    );
  }
  return context.tx as Tx;
}

/** Like `getIdempotentTransaction()`, but `undefined` outside an idempotent transaction. */
export function findIdempotentTransaction<Tx = PrismaTransactionClientLike>(): Tx | undefined {
  return prismaTransactionContext.getStore()?.tx as Tx | undefined;
}
