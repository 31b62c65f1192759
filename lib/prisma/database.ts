import type { ConnectionDeadline, IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from '../sql/port.js';
import { onDeadline, type DeadlineSignal } from '../sql/deadline-signal.js';
import { discardStuckPrismaPgClients, guardPrismaPgPools, prismaPgPoolOf } from './pg-pool-of.js';
import { isConnectionLoss } from '../sql/failures.js';
import { answersRows, type SqlResult, type Statement } from '../sql/statement.js';
import type { PrismaClientLike, PrismaProvider, PrismaTransactionClientLike, PrismaTransactionOptions } from './prisma-client.js';

/** A transaction of the Prisma store: its transaction client is what the work writes through. */
export interface PrismaTransaction extends SqlTransaction {
  readonly client: PrismaTransactionClientLike;
}

const ISOLATION: Record<IdempotentIsolationLevel, string> = {
  'READ COMMITTED': 'ReadCommitted',
  'REPEATABLE READ': 'RepeatableRead',
  SERIALIZABLE: 'Serializable',
};

/** The longest purge (or other held-connection work) Prisma lets run, ms. */
const HELD_CONNECTION_TIMEOUT = 10 * 60_000;

/**
 * The port (lib/sql/port.ts) on a PrismaClient: a statement is one `$queryRawUnsafe`
 * (when it answers rows) or `$executeRawUnsafe` (a count of rows) on the client, or on
 * the transaction client inside a transaction. Prisma lends a connection only inside an
 * interactive transaction, so a held connection (the purge's advisory lock) is one at
 * READ COMMITTED.
 */
export class PrismaDatabase implements SqlDatabase<PrismaTransaction> {
  /** The pg Pool under the client, when the store can reach it (pg-pool-of.ts). */
  private readonly pgPool: ReturnType<typeof prismaPgPoolOf>;
  /** Whether a connection stuck past the deadline is destroyed (on a reachable pg Pool) or left to the driver. */
  readonly discardsStuckConnections: boolean;

  constructor(
    readonly identity: PrismaClientLike,
    private readonly provider: PrismaProvider,
    private readonly options: PrismaTransactionOptions,
  ) {
    // Connection errors of the pg pool under the adapter must not kill the process (pg-pool-of.ts).
    if (provider === 'postgresql') guardPrismaPgPools(identity);
    this.pgPool = provider === 'postgresql' ? prismaPgPoolOf(identity) : undefined;
    this.discardsStuckConnections = this.pgPool !== undefined;
  }

  run(statement: Statement, signal?: DeadlineSignal): Promise<SqlResult> {
    const work = runOn(this.identity, this.provider, statement);
    if (!signal || !this.pgPool) return work;
    // Past the deadline, the connection running this statement (and any still being opened) is destroyed.
    return this.discardingOnDeadline(signal, () => [statement.sql], work);
  }

  withConnection<T>(fn: (connection: SqlConnection) => Promise<T>, deadline?: ConnectionDeadline): Promise<T> {
    let last = 'BEGIN';
    const work = this.identity.$transaction(
      (tx: PrismaTransactionClientLike) =>
        fn({
          run: (statement) => {
            // The connection's transaction runs at READ COMMITTED already: the MySQL purge's
            // per-batch isolation (refused inside a transaction) is in force as asked.
            if (/^SET TRANSACTION ISOLATION LEVEL READ COMMITTED$/i.test(statement.sql)) return Promise.resolve({ rows: [], affected: 0 });
            last = statement.sql;
            return runOn(tx, this.provider, statement);
          },
        }),
      { maxWait: this.options.maxWait, timeout: HELD_CONNECTION_TIMEOUT, isolationLevel: 'ReadCommitted' },
    );
    if (!deadline || !this.pgPool) return work;
    return this.discardingOnDeadline(deadline.signal, () => [last, 'BEGIN', 'COMMIT'], work);
  }

  transaction<T>(
    isolation: IdempotentIsolationLevel | undefined,
    fn: (tx: PrismaTransaction) => Promise<T>,
    deadline?: ConnectionDeadline,
  ): Promise<T> {
    let tx: ReturnType<PrismaDatabase['transactionOn']> | undefined;
    const work = this.identity.$transaction((client: PrismaTransactionClientLike) => fn((tx = this.transactionOn(client))), {
      maxWait: this.options.maxWait,
      timeout: this.options.timeout,
      ...(isolation ? { isolationLevel: ISOLATION[isolation] } : {}),
    });
    if (!deadline || !this.pgPool) return work;
    // BEGIN and its SET TRANSACTION are Prisma's; after the work, its COMMIT.
    return this.discardingOnDeadline(deadline.signal, () => [tx?.lastSql ?? 'BEGIN', 'BEGIN', 'COMMIT'], work);
  }

  /** `work`, with the pg connections stuck on `statements()` destroyed if `signal` aborts. */
  private async discardingOnDeadline<T>(signal: DeadlineSignal, statements: () => string[], work: Promise<T>): Promise<T> {
    const pool = this.pgPool!;
    const stopWatching = onDeadline(signal, () => {
      const ms = (signal.reason as { ms?: number } | undefined)?.ms ?? 0;
      // Checked out at least half the deadline ago: the request that started the stuck statement, not a later one.
      discardStuckPrismaPgClients(pool, statements(), ms / 2);
    });
    try {
      return await work;
    } finally {
      stopWatching();
    }
  }

  /** The port's transaction on an open transaction client. */
  transactionOn(client: PrismaTransactionClientLike): PrismaTransaction & { connectionLost: boolean; lastSql: string | undefined } {
    const provider = this.provider;
    const tx = {
      client,
      connectionLost: false,
      lastSql: undefined as string | undefined,
      run: async (statement: Statement) => {
        tx.lastSql = statement.sql;
        try {
          return await runOn(client, provider, statement);
        } catch (error) {
          if (isConnectionLoss(error)) tx.connectionLost = true;
          throw error;
        }
      },
    };
    return tx;
  }
}

/**
 * The database of a call nested in an idempotent transaction on the same client: Prisma
 * cannot nest interactive transactions, so its transactions are savepoints of the outer
 * one, and the inner record commits or rolls back with the outer work.
 */
export function nestedPrismaDatabase(db: PrismaDatabase, outer: PrismaTransactionClientLike): SqlDatabase<PrismaTransaction> {
  return {
    identity: db.identity,
    run: (statement) => db.run(statement),
    withConnection: (fn) => db.withConnection(fn),
    transaction: async (_isolation, fn) => {
      const tx = db.transactionOn(outer);
      await outer.$executeRawUnsafe('SAVEPOINT nestjs_idempotency_nested');
      let value;
      try {
        value = await fn(tx);
      } catch (error) {
        await outer.$executeRawUnsafe('ROLLBACK TO SAVEPOINT nestjs_idempotency_nested').catch((rollbackError: unknown) => {
          if (isConnectionLoss(rollbackError)) tx.connectionLost = true;
        });
        throw error;
      }
      await outer.$executeRawUnsafe('RELEASE SAVEPOINT nestjs_idempotency_nested');
      return value;
    },
  };
}

async function runOn(client: PrismaTransactionClientLike, provider: PrismaProvider, statement: Statement): Promise<SqlResult> {
  try {
    if (answersRows(statement)) {
      const rows = (await client.$queryRawUnsafe(statement.sql, ...statement.params)) as Record<string, unknown>[];
      return { rows, affected: rows.length };
    }
    // Prisma's adapters report rows written, and on MySQL / MariaDB rows found (the
    // connector's foundRows), as the dialects expect. No insert id: the MySQL 8 claim reads its row.
    return { rows: [], affected: Number(await client.$executeRawUnsafe(statement.sql, ...statement.params)) };
  } catch (error) {
    throw withDriverError(error, provider);
  }
}

/**
 * Puts the database's own code where lib/sql/failures.ts reads it (`driverError.code`, the
 * SQLSTATE, on PostgreSQL; `driverError.errno` on MySQL / MariaDB). Prisma keeps it in
 * `meta.driverAdapterError.cause.originalCode`. The error stays Prisma's own.
 */
function withDriverError(error: unknown, provider: PrismaProvider): unknown {
  const cause = (error as { meta?: { driverAdapterError?: { cause?: { originalCode?: unknown; originalMessage?: unknown } } } } | null)
    ?.meta?.driverAdapterError?.cause;
  if (!cause || typeof error !== 'object' || error === null || 'driverError' in error) return error;
  const code = cause.originalCode === undefined ? undefined : String(cause.originalCode);
  const message = typeof cause.originalMessage === 'string' ? cause.originalMessage : '';
  const driverError = Object.assign(new Error(message), provider === 'mysql' ? { errno: Number(code) } : { code });
  Object.defineProperty(error, 'driverError', { value: driverError, enumerable: false, configurable: true });
  return error;
}
