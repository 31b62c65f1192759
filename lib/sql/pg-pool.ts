/**
 * Destroying node-postgres connections that a dead network path holds, for the SQL stores
 * whose pool the library reaches (Drizzle on node-postgres, Prisma on a pg Pool given to
 * `PrismaPg`). Structural: nothing of `pg` is imported. The fields read are the ones
 * pg-pool itself reads (`_queryable` on release, `_clients`, and its own
 * `connectionTimeoutMillis` destroys a connecting client's `connection.stream` too).
 */

/** A node-postgres client, as far as destroying it goes. */
interface PgClientState {
  _queryable?: boolean;
  _connecting?: boolean;
  _connected?: boolean;
  connection?: { stream?: { destroy(error?: Error): void } };
}

/**
 * Destroys a checked-out pg client whose statement ran past its deadline: marked not
 * queryable (pg-pool then removes it on release instead of handing it out again) and its
 * socket destroyed, which fails what waits on it at once.
 */
export function discardPgClient(client: unknown): void {
  try {
    const state = client as PgClientState;
    state._queryable = false;
    state.connection?.stream?.destroy();
  } catch {
    // Best effort: the call failed at its deadline already.
  }
}

/**
 * Destroys the pool's connections still being opened: called when a checkout ran past its
 * deadline. On a path that drops every packet, a new connection's startup never gets an
 * answer, and without `connectionTimeoutMillis` pg-pool waits for it forever, holding one
 * of its `max` slots: after the fault the pool would have none left. A destroyed one fails
 * its checkout, and pg-pool drops it and opens the next when asked.
 */
export function discardConnectingPgClients(pool: unknown): number {
  let discarded = 0;
  const clients = (pool as { _clients?: PgClientState[] })._clients ?? [];
  for (const client of clients) {
    if (client._connecting === true && client._connected !== true && client.connection?.stream) {
      discarded++;
      discardPgClient(client);
    }
  }
  return discarded;
}
