import { IdempotencyConfigurationError } from '../core/errors.js';
import { isConnectionLoss } from '../sql/failures.js';
import type { ConnectionDeadline, IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from '../sql/port.js';
import type { SqlResult, Statement } from '../sql/statement.js';
import {
  drizzleDriverOf,
  isDrizzleDatabase,
  isDrizzleTransaction,
  type DrizzleDriver,
  type MysqlQueryable,
  type PgQueryable,
} from './drizzle-internals.js';
import { runMysqlStatement, runPgStatement } from './statement-runners.js';
import { runMysqlStatementDiscarding, runPgStatementDiscarding } from './pool-checkout.js';
import { discardPgClient, guardPgPool } from '../sql/pg-pool.js';
import { onDeadline, type DeadlineSignal } from '../sql/deadline-signal.js';

/** A Drizzle database as the store sees it: something with `transaction(fn, config)`. */
export interface DrizzleDatabaseLike {
  transaction(fn: (tx: never) => Promise<unknown>, config?: never): Promise<unknown>;
}

/** The transaction the record logic runs in, and the Drizzle transaction (`tx`) the work gets. */
export class DrizzleSqlTransaction implements SqlTransaction {
  connectionLost = false;

  constructor(
    /** The Drizzle transaction object the callback of `db.transaction()` received. */
    readonly drizzle: unknown,
    private readonly runOn: (statement: Statement) => Promise<SqlResult>,
  ) {}

  run(statement: Statement): Promise<SqlResult> {
    return this.runOn(statement);
  }
}

/**
 * The port (`sql/port.ts`) on a Drizzle database over node-postgres or mysql2: the store's
 * statements go to the driver's pool (or, in a transaction, to the transaction's own
 * connection), and the transaction is Drizzle's own `db.transaction()`, so the work gets a
 * real Drizzle `tx` with the user's schema and the record commits with it.
 */
export class DrizzleSqlDatabase implements SqlDatabase<DrizzleSqlTransaction> {
  readonly dialect: 'postgres' | 'mysql';

  private constructor(
    readonly identity: DrizzleDatabaseLike,
    private readonly driver: DrizzleDriver,
  ) {
    this.dialect = driver.dialect;
    // Connection errors of the pool (an idle client, or one checked out) must not kill the process (sql/pg-pool.ts).
    if (driver.dialect === 'postgres' && driver.pool) guardPgPool(driver.pool);
  }

  /** The port of `db`; refuses anything but a Drizzle database on node-postgres or mysql2. */
  static of(db: unknown, owner: string): DrizzleSqlDatabase {
    const known = cache.get(db as object);
    if (known) return known;
    if (isDrizzleTransaction(db)) {
      throw new IdempotencyConfigurationError(
        `${owner} was given a Drizzle transaction (tx) instead of the database.`,
        'Pass the database made by drizzle(...): the idempotent transaction opens its own transaction, and the writes that must commit with the record go in its callback, through the tx it receives.',
      );
    }
    const driver = drizzleDriverOf(db);
    if (!driver) {
      throw new IdempotencyConfigurationError(
        isDrizzleDatabase(db)
          ? `${owner} does not support this Drizzle driver.`
          : `${owner} needs a Drizzle database, got ${db === null ? 'null' : typeof db}.`,
        "Use drizzle-orm on node-postgres (import { drizzle } from 'drizzle-orm/node-postgres') or on mysql2 (import { drizzle } from 'drizzle-orm/mysql2'), made on a pool; for other databases use the Redis store.",
      );
    }
    const database = new DrizzleSqlDatabase(db as DrizzleDatabaseLike, driver);
    cache.set(db as object, database);
    return database;
  }

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    const driver = this.driver;
    // On a pool under a deadline: a connection of its own, destroyed if the deadline passes (pool-checkout.ts).
    if (signal && driver.pool) {
      return driver.dialect === 'postgres'
        ? runPgStatementDiscarding(driver.pool, statement, signal)
        : runMysqlStatementDiscarding(driver.pool, statement, signal);
    }
    return this.runOnClient(driver.client, statement);
  }

  async withConnection<T>(fn: (connection: SqlConnection) => Promise<T>, deadline?: ConnectionDeadline): Promise<T> {
    const driver = this.driver;
    const signal = deadline?.signal;
    // A database made on one client (not a pool): that client is the connection.
    if (!driver.pool) return fn({ run: (statement) => this.run(statement) });
    if (driver.dialect === 'postgres') {
      const client = await driver.pool.connect();
      // Past the deadline, the held connection is destroyed (its lock goes with the session).
      const stopWatching = onDeadline(signal, () => discardPgClient(client));
      let lost: Error | undefined;
      try {
        return await fn({ run: (statement) => runPgStatement(client, statement) });
      } catch (error) {
        if (isConnectionLoss(error)) lost = error as Error;
        throw error;
      } finally {
        stopWatching();
        // A client whose session is gone (or unknown) never goes back to the pool.
        client.release(lost ?? signal?.reason);
      }
    }
    const connection = await driver.pool.getConnection();
    const stopWatching = onDeadline(signal, () => connection.destroy());
    let lost = false;
    try {
      return await fn({ run: (statement) => runMysqlStatement(connection, statement) });
    } catch (error) {
      lost = isConnectionLoss(error);
      throw error;
    } finally {
      stopWatching();
      if (lost || signal?.aborted) connection.destroy();
      else connection.release();
    }
  }

  /**
   * Drizzle's `db.transaction(fn, { isolationLevel })`. When `fn` fails and drizzle's
   * rollback fails too, drizzle throws the rollback's error in place of `fn`'s: `fn`'s is
   * rethrown instead, and the failed rollback marks the transaction's connection as lost.
   */
  async transaction<T>(
    isolation: IdempotentIsolationLevel | undefined,
    fn: (tx: DrizzleSqlTransaction) => Promise<T>,
    deadline?: ConnectionDeadline,
  ): Promise<T> {
    const config = isolation ? { isolationLevel: isolation.toLowerCase() } : undefined;
    let tx: DrizzleSqlTransaction | undefined;
    let failed: { error: unknown } | undefined;
    const open = this.identity.transaction as (fn: (tx: unknown) => Promise<T>, config?: unknown) => Promise<T>;
    try {
      return await open.call(
        this.identity,
        async (drizzleTx) => {
          const connection = drizzleDriverOf(drizzleTx)?.client;
          if (!connection) throw new Error('The Drizzle transaction has no driver connection (drizzle-orm changed its internals).');
          tx = new DrizzleSqlTransaction(drizzleTx, (statement) => this.runOnClient(connection, statement));
          // Past the deadline (a statement, the COMMIT) the transaction's connection is destroyed:
          // drizzle's rollback then fails at once and its release leaves it out of the pool.
          const stopWatching = onDeadline(deadline?.signal, () => this.discard(connection));
          try {
            return await fn(tx);
          } catch (error) {
            failed = { error };
            stopWatching();
            throw error;
          }
        },
        config,
      );
    } catch (error) {
      if (failed && error !== failed.error) {
        // A rollback that fails never leaves a usable session (the server ended it, or the
        // socket broke); whatever the driver's error says, nothing of the work committed.
        if (tx) tx.connectionLost = true;
        throw failed.error;
      }
      throw error;
    }
  }

  /**
   * This database as seen from inside `outer`, an open Drizzle transaction on it: statements
   * run on the transaction's connection and a transaction is a savepoint of it (drizzle's
   * nested `tx.transaction()`), so a nested idempotent transaction commits or rolls back
   * with the outer one.
   */
  joined(outer: unknown): SqlDatabase<DrizzleSqlTransaction> {
    const connection = drizzleDriverOf(outer)?.client;
    if (!connection) throw new Error('The Drizzle transaction has no driver connection (drizzle-orm changed its internals).');
    const run = (statement: Statement) => this.runOnClient(connection, statement);
    const savepoint = (outer as DrizzleDatabaseLike).transaction as (fn: (tx: unknown) => Promise<unknown>) => Promise<unknown>;
    return {
      identity: this.identity,
      run,
      withConnection: (fn) => fn({ run }),
      transaction: <T>(_isolation: IdempotentIsolationLevel | undefined, fn: (tx: DrizzleSqlTransaction) => Promise<T>) =>
        savepoint.call(outer, (inner) => fn(new DrizzleSqlTransaction(inner, run))) as Promise<T>,
    };
  }

  /** Destroys a connection past its deadline (a pg client, a mysql2 connection). */
  private discard(connection: PgQueryable | MysqlQueryable): void {
    if (this.driver.dialect === 'postgres') discardPgClient(connection);
    else (connection as { destroy?(): void }).destroy?.();
  }

  private runOnClient(client: PgQueryable | MysqlQueryable, statement: Statement): Promise<SqlResult> {
    return this.driver.dialect === 'postgres'
      ? runPgStatement(client as PgQueryable, statement)
      : runMysqlStatement(client as MysqlQueryable, statement);
  }
}

const cache = new WeakMap<object, DrizzleSqlDatabase>();
