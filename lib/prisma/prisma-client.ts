/**
 * A Prisma client as this entry point uses it, structurally: nothing of `@prisma/client`
 * is imported, so an application that does not use Prisma never loads it, and any
 * generated client (or `$extends()` of one) fits.
 */

/** What a transaction client (the `tx` of an interactive `$transaction`) offers: raw SQL. */
export interface PrismaTransactionClientLike {
  $queryRawUnsafe(query: string, ...values: unknown[]): Promise<unknown>;
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>;
}

/** Options of an interactive transaction, as `PrismaClient.$transaction(fn, options)` takes them. */
export interface PrismaTransactionOptions {
  /**
   * Longest wait for a connection from the pool, ms (Prisma's `maxWait`).
   * @default Prisma's (2000)
   */
  maxWait?: number;
  /**
   * Longest run of the whole transaction, ms (Prisma's `timeout`): Prisma rolls back a
   * transaction that runs longer, and the caller gets `IdempotencyStoreUnavailableError`
   * (retriable; nothing committed). A duplicate's transaction waits for the first one's
   * inside this time: give it the longest work plus that wait.
   * @default Prisma's (5000)
   */
  timeout?: number;
}

/** A `PrismaClient` (on a driver adapter: `@prisma/adapter-pg`, `@prisma/adapter-mariadb`). */
export interface PrismaClientLike extends PrismaTransactionClientLike {
  $transaction<R>(fn: (tx: any) => Promise<R>, options?: PrismaTransactionOptions & { isolationLevel?: string }): Promise<R>;
}

/** The transaction client type of a client type (the argument of its `$transaction` callback). */
export type TransactionClientOf<C> = C extends { $transaction(fn: (tx: infer Tx) => Promise<any>, options?: any): Promise<any> }
  ? Tx
  : PrismaTransactionClientLike;

/** The SQL family behind a client: PostgreSQL, or MySQL / MariaDB. */
export type PrismaProvider = 'postgresql' | 'mysql';

/**
 * The provider of a generated client (`_activeProvider`, set from the schema's datasource;
 * the driver adapter's `provider` otherwise): the one read of a field Prisma does not
 * publish, checked by test/prisma/internals.spec.ts. Undefined when neither says.
 */
export function providerOf(client: object): string | undefined {
  const known = client as { _activeProvider?: unknown; _engineConfig?: { adapter?: { provider?: unknown } } };
  const provider = known._activeProvider ?? known._engineConfig?.adapter?.provider;
  if (provider === 'postgres') return 'postgresql';
  return typeof provider === 'string' ? provider : undefined;
}
