import { AsyncLocalStorage } from 'node:async_hooks';
import { IdempotencyConfigurationError } from '../core/errors.js';

/** The transaction a `runIdempotentTransaction` callback or transactional handler runs in. */
export interface DrizzleTransactionContext {
  /** The Drizzle database the transaction was opened on. */
  readonly db: object;
  /** Drizzle's transaction object (`tx`). */
  readonly tx: unknown;
}

/**
 * A Drizzle database's transaction type: what the callback of `db.transaction()` receives
 * (`NodePgTransaction<...>`, `MySql2Transaction<...>`), with the database's schema.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- any callback and config of drizzle's generic transaction(); an untyped db gives an untyped tx */
export type DrizzleTransactionOf<DB> = 0 extends 1 & DB
  ? any
  : DB extends { transaction(fn: (tx: infer Tx) => any, ...rest: any[]): any }
    ? Tx
    : unknown;
/* eslint-enable @typescript-eslint/no-explicit-any */

/**
 * @internal Registered on a global symbol, so that the ESM and CommonJS copies of this
 * package (both may load in one process) share the transaction a handler runs in.
 */
export const drizzleTransactionContext: AsyncLocalStorage<DrizzleTransactionContext> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for('nestjs-idempotency:drizzle:transaction')
] ??= new AsyncLocalStorage<DrizzleTransactionContext>()) as AsyncLocalStorage<DrizzleTransactionContext>;

/**
 * The Drizzle transaction (`tx`) of the idempotent transaction running around the caller:
 * inside a handler decorated with `@Idempotent({ transactional: true })` (with the
 * `DrizzleIdempotencyStore`), or inside a `runIdempotentTransaction` callback. Writes made
 * through it commit together with the idempotency record, or not at all. Name your
 * database's type to get its transaction's: `getIdempotentTransaction<typeof db>()`.
 *
 * Throws `IdempotencyConfigurationError` anywhere else.
 */
export function getIdempotentTransaction<DB = unknown>(): DrizzleTransactionOf<DB> {
  const context = drizzleTransactionContext.getStore();
  if (!context) {
    throw new IdempotencyConfigurationError(
      'getIdempotentTransaction() was called outside an idempotent transaction.',
      'Call it only while a handler decorated with @Idempotent({ transactional: true }) runs (the module must use DrizzleIdempotencyStore), or inside the callback of runIdempotentTransaction(), which also receives the tx as its argument.',
    );
  }
  return context.tx as DrizzleTransactionOf<DB>;
}

/** Like `getIdempotentTransaction()`, but `undefined` outside an idempotent transaction. */
export function findIdempotentTransaction<DB = unknown>(): DrizzleTransactionOf<DB> | undefined {
  return drizzleTransactionContext.getStore()?.tx as DrizzleTransactionOf<DB> | undefined;
}
