import type { DataSource, QueryRunner } from 'typeorm';
import { discardConnectingPgClients } from '../../sql/pg-pool.js';
import { mysqlPoolOf, pgPoolOf } from '../internals.js';

/*
 * Discarding a connection that ran past the store's deadline (`statementTimeout`): its
 * socket is stuck (a stalled path, a server that stopped answering), so it must never go
 * back to the pool, where the next request would wait on it too. Destroying the socket
 * fails whatever still waits on it; the server rolls back an open transaction when it
 * sees the session end.
 */

/** A node-postgres client, as far as discarding it goes. */
interface PgClientSocket {
  _queryable?: boolean;
  connection?: { stream?: { destroy(error?: Error): void } };
}

/** A mysql2 connection, as far as discarding it goes (a pool connection's `destroy` also takes it out of its pool). */
interface MysqlConnection {
  destroy(): void;
  stream?: { destroy(error?: Error): void };
  /** The server's greeting: set once the connection is open (mysql2). */
  _handshakePacket?: unknown;
  _closing?: boolean;
  _fatalError?: unknown;
  /** When it was made, or last released to its pool (mysql2's PoolConnection), Date.now(). */
  lastActiveTime?: number;
}

/** A mysql2 pool, as far as finding the connections it is still opening goes. */
interface MysqlPoolState {
  _allConnections?: { length: number; get(index: number): MysqlConnection };
  _freeConnections?: { length: number };
  config?: { connectionLimit?: number };
}

/**
 * Destroys a pooled connection of the DataSource's driver: a pg client (marked not
 * queryable first, so pg-pool discards it on release rather than hand it out again) or a
 * mysql2 connection.
 */
export function discardConnection(dataSource: DataSource, connection: unknown): void {
  if (!connection || typeof connection !== 'object') return;
  try {
    if (dataSource.options.type === 'postgres') {
      const client = connection as PgClientSocket;
      client._queryable = false;
      client.connection?.stream?.destroy();
    } else if (typeof (connection as Partial<MysqlConnection>).destroy === 'function') {
      destroyMysqlConnection(connection as MysqlConnection);
    }
  } catch {
    // Discarding is best effort: the call failed at its deadline already.
  }
}

/**
 * Destroys the connection a query runner holds. None yet (its checkout ran past the
 * deadline): the pool's connections still being opened are destroyed (sql/pg-pool.ts and
 * `discardOpeningMysqlConnections`: on a dead path their handshake never gets an answer,
 * and each holds a slot of the pool); a late checkout is released by its caller.
 */
export function discardRunnerConnection(dataSource: DataSource, runner: QueryRunner): void {
  const connection = (runner as { databaseConnection?: unknown }).databaseConnection;
  if (connection) discardConnection(dataSource, connection);
  else discardConnecting(dataSource);
}

/** A checkout ran past its deadline: destroys the pool's connections still being opened (mysql2: opening for a while, see below). */
export function discardConnecting(dataSource: DataSource): void {
  const pool = pgPoolOf(dataSource);
  if (pool) discardConnectingPgClients(pool);
  else discardOpeningMysqlConnections(mysqlPoolOf(dataSource));
}

/**
 * A checkout is about to start on the DataSource's mysql2 pool: when every slot is taken,
 * the connections stuck opening are destroyed first, so that it waits for a connection
 * that can come (see `discardOpeningMysqlConnections`). Nothing on other drivers, or while
 * the pool has a free connection or a free slot (two field reads).
 */
export function freeStuckMysqlSlots(pool: unknown): void {
  const state = pool as MysqlPoolState | undefined;
  const limit = state?.config?.connectionLimit;
  if (!state?._allConnections || !state._freeConnections || !limit) return;
  if (state._freeConnections.length === 0 && state._allConnections.length >= limit) discardOpeningMysqlConnections(pool);
}

/** `freeStuckMysqlSlots` on the DataSource's pool, when it is a mysql2 one. */
export function freeStuckSlotsOf(dataSource: DataSource): void {
  const pool = mysqlPoolOf(dataSource);
  if (pool) freeStuckMysqlSlots(pool);
}

/**
 * How long a mysql2 connection may go without the server's greeting before the store
 * takes it for stuck, ms. A handshake on a working path takes milliseconds; after the
 * heal of a path that dropped every packet, a connection opened before the heal is this
 * old at most this long after it.
 */
export const MYSQL_OPENING_STUCK_MS = 1_000;

/**
 * Destroys a mysql2 connection for good: its socket first, with an error, so that mysql2
 * fails what waits on it (a statement, the handshake) on the next tick, then `destroy()`,
 * which takes it out of its pool at once (the slot goes to the next checkout). `destroy()`
 * alone only ends the socket: a FIN that a dead path drops, so the socket stayed open and
 * whatever waited on it waited for good.
 */
function destroyMysqlConnection(connection: MysqlConnection): void {
  // Not ECONNRESET: mysql2 ignores that one on a connection it is closing.
  connection.stream?.destroy(
    Object.assign(new Error('connection destroyed by the idempotency store: no answer within statementTimeout'), { code: 'ETIMEDOUT' }),
  );
  connection.destroy();
}

/**
 * Destroys the mysql2 pool's connections that have been opening (no greeting from the
 * server yet) for `MYSQL_OPENING_STUCK_MS` or longer. On a path that drops every packet a
 * new connection's handshake never gets an answer, and mysql2 waits for it for
 * `connectTimeout` (10 s by default), holding one of the pool's `connectionLimit` slots:
 * after the heal, checkouts queued behind such slots for that long (the 6 s seen on
 * MariaDB). A connection opened moments ago is spared (it may be on the healed path).
 * Called when a statement or a checkout ran past its deadline, and before a checkout that
 * finds every slot taken.
 */
export function discardOpeningMysqlConnections(pool: unknown, now = Date.now()): number {
  const all = (pool as MysqlPoolState | undefined)?._allConnections;
  if (!all || typeof all.get !== 'function') return 0;
  const before = now - MYSQL_OPENING_STUCK_MS;
  const opening: MysqlConnection[] = [];
  for (let i = 0; i < all.length; i++) {
    const connection = all.get(i);
    const stuck = connection && connection._handshakePacket == null && !connection._closing && !connection._fatalError;
    if (stuck && (connection.lastActiveTime ?? 0) <= before) opening.push(connection);
  }
  // Collected first: destroying one takes it out of `_allConnections`.
  for (const connection of opening) {
    try {
      destroyMysqlConnection(connection);
    } catch {
      // Best effort, like every discard.
    }
  }
  return opening.length;
}
