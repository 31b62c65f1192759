import { discardConnectingPgClients, discardPgClient } from '../sql/pg-pool.js';

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
