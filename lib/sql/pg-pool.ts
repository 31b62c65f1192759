import { Logger, type LoggerService } from '@nestjs/common';
import { RateLimitedLog } from '../observability/rate-limited-log.js';

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

/** A node-postgres pool, as far as guarding its connections' errors goes. */
interface PgPoolEvents {
  on(event: 'connect' | 'error', listener: (value: never) => void): unknown;
  _clients?: unknown[];
}

/** A node-postgres client, as far as listening to its errors goes. */
interface PgClientEvents {
  on(event: 'error', listener: (error: Error) => void): unknown;
  listeners(event: 'error'): Function[];
}

const guardedPools = new WeakSet<object>();

/**
 * Keeps the connection errors of a node-postgres pool the store reaches from killing the
 * process. node-postgres reports a connection the server ended (`pg_terminate_backend`, a
 * restart, a failover) as an 'error' event: on the pool for an idle client (pg-pool removes
 * it, then emits 'error', which throws when nobody listens), and on the client itself while
 * it is checked out, where pg-pool leaves it no listener of its own. Whoever checked it out
 * may attach one only later: `@prisma/adapter-pg` does so after an `await`, so a server that
 * ends a session just after its startup (its error in the same read as the startup's last
 * message) reaches a client with no listener (the Prisma invariant harness crashed so). So:
 * every client of the pool gets a listener for good (the statement in flight still rejects,
 * and pg-pool drops the broken client on release), and the pool one that writes a line (at
 * most one per cause per 10 s) saying what was lost. Once per pool.
 */
export function guardPgPool(pool: unknown, logger?: LoggerService): void {
  const events = pool as Partial<PgPoolEvents> | null | undefined;
  if (!events || typeof events.on !== 'function' || guardedPools.has(events)) return;
  guardedPools.add(events);
  for (const client of events._clients ?? []) guardPgClient(client);
  events.on('connect', guardPgClient as (client: never) => void);
  let log: RateLimitedLog | undefined;
  events.on('error', ((error: Error & { code?: unknown }) => {
    log ??= new RateLimitedLog(logger ?? new Logger('Idempotency'));
    const code = typeof error?.code === 'string' ? ` (${error.code})` : '';
    log.warn(
      `pg-pool-idle-client${code}`,
      `PostgreSQL ended an idle pooled connection${code}: ${error?.message ?? String(error)}. The pool dropped it and opens another when needed.`,
    );
  }) as (error: never) => void);
}

/** A listener for good on a pg client: its error is its statement's (which rejects) or the pool's (which logs it). */
function guardPgClient(client: unknown): void {
  const events = client as Partial<PgClientEvents> | null | undefined;
  if (!events || typeof events.on !== 'function' || typeof events.listeners !== 'function') return;
  if (!events.listeners('error').includes(ignoreClientError)) events.on('error', ignoreClientError);
}

function ignoreClientError(): void {}
