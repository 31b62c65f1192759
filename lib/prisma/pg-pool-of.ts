import { discardConnectingPgClients, discardPgClient, guardPgPool } from '../sql/pg-pool.js';

/**
 * The node-postgres pool under a Prisma client, and how a connection it holds is destroyed
 * when one of the store's operations runs past its deadline (issue 42): a path that drops
 * every packet leaves the socket open, and `@prisma/adapter-pg` would keep handing the
 * stuck connection out (a transaction's client goes back to the pool without an error).
 *
 * The pool is reachable when the adapter was made on one (`new PrismaPg(pool)`: the
 * factory's `externalPool`, beside the `provider` that prisma-client.ts reads); an adapter
 * made on a configuration builds its pool out of reach, and the stuck connection is then
 * left to the driver (the deadline's error says so).
 */

/** A pg Pool as far as this file uses it. */
interface PgPoolLike {
  connect(): unknown;
  on(event: 'acquire', listener: (client: object) => void): unknown;
  _clients?: unknown[];
}

/** A pg client, as far as telling which statement it runs goes (pg 8: `_activeQuery`). */
interface PgClientQuery {
  _activeQuery?: { text?: unknown } | null;
}

/** When each client was last checked out, performance.now(); per pool. */
const checkouts = new WeakMap<object, WeakMap<object, number>>();

/** The pg Pool of `client`'s `PrismaPg` adapter, when it was made on one. */
export function prismaPgPoolOf(client: object): PgPoolLike | undefined {
  const adapter = (client as { _engineConfig?: { adapter?: { provider?: unknown; externalPool?: unknown } } })._engineConfig?.adapter;
  const pool = adapter?.provider === 'postgres' ? (adapter.externalPool as Partial<PgPoolLike> | null | undefined) : undefined;
  if (!pool || typeof pool.connect !== 'function' || typeof pool.on !== 'function' || !Array.isArray(pool._clients)) return undefined;
  if (!checkouts.has(pool)) {
    const times = new WeakMap<object, number>();
    checkouts.set(pool, times);
    pool.on('acquire', (pgClient) => times.set(pgClient, performance.now()));
  }
  return pool as PgPoolLike;
}

/**
 * Destroys the pool's connections stuck on one of the store's operations: those whose
 * running statement is `sql` (or one of `alsoSql`) and that were checked out at least
 * `stuckForMs` ago, and the connections still being opened (a checkout past its deadline).
 * A connection that runs the same statement for a request that started later is spared.
 */
export function discardStuckPrismaPgClients(pool: PgPoolLike, sql: readonly string[], stuckForMs: number): void {
  const times = checkouts.get(pool);
  const before = performance.now() - stuckForMs;
  for (const pgClient of pool._clients ?? []) {
    const text = (pgClient as PgClientQuery)._activeQuery?.text;
    if (typeof text !== 'string' || !sql.includes(text)) continue;
    const checkedOutAt = times?.get(pgClient as object);
    if (checkedOutAt !== undefined && checkedOutAt <= before) discardPgClient(pgClient);
  }
  discardConnectingPgClients(pool);
}

/** A `PrismaPg` adapter factory, as far as reaching the pool it connects on goes. */
interface PgAdapterFactory {
  provider?: unknown;
  externalPool?: unknown;
  connect?: (...args: unknown[]) => Promise<unknown>;
}

const guardedFactories = new WeakSet<object>();

/**
 * Keeps the connection errors of the pg Pool under `client`'s `PrismaPg` adapter from
 * killing the process (sql/pg-pool.ts, `guardPgPool`). A pool given to the adapter
 * (`new PrismaPg(pool)`) is guarded at once. An adapter made on a configuration builds its
 * pool when Prisma connects: the factory's `connect` is wrapped, once, to guard each pool it
 * builds (Prisma calls it on its first query and after a `$disconnect()`); a client that
 * connected before the store was made keeps its unguarded pool until it connects again.
 */
export function guardPrismaPgPools(client: object): void {
  const factory = (client as { _engineConfig?: { adapter?: PgAdapterFactory } })._engineConfig?.adapter;
  if (!factory || factory.provider !== 'postgres') return;
  if (factory.externalPool) {
    guardPgPool(factory.externalPool);
    return;
  }
  const connect = factory.connect;
  if (typeof connect !== 'function' || guardedFactories.has(factory)) return;
  guardedFactories.add(factory);
  factory.connect = async function guardedConnect(this: unknown, ...args: unknown[]) {
    const adapter = await connect.apply(this, args);
    const driver = (adapter as { underlyingDriver?: () => unknown } | null)?.underlyingDriver?.();
    if (driver && Array.isArray((driver as { _clients?: unknown })._clients)) guardPgPool(driver);
    return adapter;
  };
}
