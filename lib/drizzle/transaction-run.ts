import type { SqlDatabase } from '../sql/port.js';
import type { DrizzleSqlDatabase, DrizzleSqlTransaction } from './drizzle-database.js';
import { drizzleTransactionContext } from './transaction-context.js';

/** Runs the work of an idempotent transaction where `getIdempotentTransaction()` returns its `tx`. */
export function runInTransactionContext<R>(db: object, tx: DrizzleSqlTransaction, work: (drizzleTx: unknown) => Promise<R>): Promise<R> {
  return drizzleTransactionContext.run({ db, tx: tx.drizzle }, () => work(tx.drizzle));
}

/**
 * Inside an idempotent transaction on the same database (a transactional handler calling
 * `runIdempotentTransaction`, say): that transaction, through which a nested one joins it as
 * a savepoint. `undefined` anywhere else: the nested call then opens its own transaction.
 */
export function nestedDatabaseOf(database: DrizzleSqlDatabase): SqlDatabase<DrizzleSqlTransaction> | undefined {
  const context = drizzleTransactionContext.getStore();
  if (!context || context.db !== database.identity) return undefined;
  return database.joined(context.tx);
}
