import type { IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from '../sql/port.js';
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
  constructor(
    readonly identity: PrismaClientLike,
    private readonly provider: PrismaProvider,
    private readonly options: PrismaTransactionOptions,
  ) {}

  run(statement: Statement): Promise<SqlResult> {
    return runOn(this.identity, this.provider, statement);
  }

  withConnection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
    return this.identity.$transaction(
      (tx: PrismaTransactionClientLike) =>
        fn({
          run: (statement) =>
            // The connection's transaction runs at READ COMMITTED already: the MySQL purge's
            // per-batch isolation (refused inside a transaction) is in force as asked.
            /^SET TRANSACTION ISOLATION LEVEL READ COMMITTED$/i.test(statement.sql)
              ? Promise.resolve({ rows: [], affected: 0 })
              : runOn(tx, this.provider, statement),
        }),
      { maxWait: this.options.maxWait, timeout: HELD_CONNECTION_TIMEOUT, isolationLevel: 'ReadCommitted' },
    );
  }

  transaction<T>(isolation: IdempotentIsolationLevel | undefined, fn: (tx: PrismaTransaction) => Promise<T>): Promise<T> {
    return this.identity.$transaction((client: PrismaTransactionClientLike) => fn(this.transactionOn(client)), {
      maxWait: this.options.maxWait,
      timeout: this.options.timeout,
      ...(isolation ? { isolationLevel: ISOLATION[isolation] } : {}),
    });
  }

  /** The port's transaction on an open transaction client. */
  transactionOn(client: PrismaTransactionClientLike): PrismaTransaction & { connectionLost: boolean } {
    const provider = this.provider;
    const tx = {
      client,
      connectionLost: false,
      run: async (statement: Statement) => {
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
