import { AsyncLocalStorage } from 'node:async_hooks';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../core/errors.js';
import type { RecordDialect, Statement } from './record-sql.js';

export interface SqlResult {
  readonly rows: Record<string, unknown>[];
  readonly affected: number;
}

/** The DataSource behind a query runner (`dataSource` on TypeORM 1.x, `connection` on 0.3). */
export function dataSourceOfRunner(runner: QueryRunner): DataSource {
  return (runner as { dataSource?: DataSource }).dataSource ?? (runner as unknown as { connection: DataSource }).connection;
}

/** The node-postgres pool TypeORM's PostgreSQL driver keeps (`driver.master`), as far as the store uses it. */
export interface PgQueryPool {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
  connect(): unknown;
}

/** The pool of an initialized PostgreSQL DataSource; undefined for other drivers (or before `initialize()`). */
export function pgPoolOf(dataSource: DataSource): PgQueryPool | undefined {
  if (dataSource.options.type !== 'postgres') return undefined;
  const pool = (dataSource.driver as { master?: Partial<PgQueryPool> }).master;
  return pool && typeof pool.query === 'function' && typeof pool.connect === 'function' ? (pool as PgQueryPool) : undefined;
}

/**
 * Runs one statement straight on the pool, as a named prepared statement when it has a
 * name. The store's own statements take this path: TypeORM's query runner (check out,
 * events, result mapping, release) cost more app CPU than the query itself, and an
 * unprepared statement is parsed and planned by the server on every call. Queries are
 * still reported to the DataSource's logger, like TypeORM's own.
 */
export async function runPooledStatement(dataSource: DataSource, pool: PgQueryPool, statement: Statement): Promise<SqlResult> {
  if (!guardedDataSources.has(dataSource)) guardPgClientErrors(dataSource);
  return runOnPg(dataSource, pool, statement);
}

/** A node-postgres pool or client: both take a query config and return a promise. */
type PgQueryable = Pick<PgQueryPool, 'query'>;

async function runOnPg(dataSource: DataSource, target: PgQueryable, statement: Statement): Promise<SqlResult> {
  const logger = dataSource.logger;
  logger.logQuery(statement.sql, statement.params);
  const startedAt = Date.now();
  let result;
  try {
    result = await target.query({ name: statement.name, text: statement.sql, values: statement.params });
  } catch (error) {
    logger.logQueryError(error as Error, statement.sql, statement.params);
    throw error;
  }
  const slowAfter = dataSource.options.maxQueryExecutionTime;
  const tookMs = Date.now() - startedAt;
  if (slowAfter && tookMs > slowAfter) logger.logQuerySlow(tookMs, statement.sql, statement.params);
  return { rows: result.rows, affected: result.rowCount ?? result.rows.length };
}

/**
 * The `pg` client a PostgreSQL query runner holds while connected (inside a
 * transaction), so that named statements can be prepared on that very connection.
 */
function connectedPgClientOf(runner: QueryRunner): PgQueryable | undefined {
  if (runner.isReleased || dataSourceOfRunner(runner).options.type !== 'postgres') return undefined;
  const client = (runner as { databaseConnection?: Partial<PgQueryable> }).databaseConnection;
  return client && typeof client.query === 'function' ? (client as PgQueryable) : undefined;
}

export async function runStatement(runner: QueryRunner, statement: Statement): Promise<SqlResult> {
  const client = statement.name ? connectedPgClientOf(runner) : undefined;
  if (client) return runOnPg(dataSourceOfRunner(runner), client, statement);
  const result = await runner.query(statement.sql, statement.params, true);
  const rows = (result.records ?? []) as Record<string, unknown>[];
  return { rows, affected: result.affected ?? rows.length };
}

/** The transaction a `runIdempotentTransaction` callback or transactional handler runs in. */
export interface IdempotentTransactionContext {
  readonly dataSource: DataSource;
  readonly queryRunner: QueryRunner;
  readonly manager: EntityManager;
}

/**
 * @internal Registered on a global symbol, so that the ESM and CommonJS copies of this
 * package (both may load in one process) share the transaction a handler runs in.
 */
export const transactionContext: AsyncLocalStorage<IdempotentTransactionContext> = ((globalThis as Record<symbol, unknown>)[
  Symbol.for('nestjs-idempotency:typeorm:transaction')
] ??= new AsyncLocalStorage<IdempotentTransactionContext>()) as AsyncLocalStorage<IdempotentTransactionContext>;

/**
 * The `EntityManager` of the idempotent transaction running around the caller: inside
 * a handler decorated with `@Idempotent({ transactional: true })` (with the
 * `TypeOrmIdempotencyStore`), or inside a `runIdempotentTransaction` callback. Writes made
 * through it commit together with the idempotency record, or not at all.
 *
 * Throws `IdempotencyConfigurationError` anywhere else.
 */
export function getIdempotentEntityManager(): EntityManager {
  const context = transactionContext.getStore();
  if (!context) {
    throw new IdempotencyConfigurationError(
      'getIdempotentEntityManager() was called outside an idempotent transaction.',
      'Call it only while a handler decorated with @Idempotent({ transactional: true }) runs (the module must use TypeOrmIdempotencyStore), or inside the callback of runIdempotentTransaction(), which also receives the manager as its argument.',
    );
  }
  return context.manager;
}

/** Like `getIdempotentEntityManager()`, but `undefined` outside an idempotent transaction. */
export function findIdempotentEntityManager(): EntityManager | undefined {
  return transactionContext.getStore()?.manager;
}

/**
 * FIFO mutual exclusion. SQLite drivers run every query on ONE connection, so two
 * transactions interleaved on it would nest into each other; the store serializes its
 * own work on a SQLite DataSource through one of these.
 */
export class Mutex {
  private held = false;
  private readonly waiters: Array<() => void> = [];

  /** Resolves with the release function; rejects after `timeoutMs` when given. */
  acquire(timeoutMs?: number): Promise<() => void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const grant = () => {
        if (timer) clearTimeout(timer);
        resolve(this.releaser());
      };
      this.waiters.push(grant);
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          const index = this.waiters.indexOf(grant);
          if (index >= 0) this.waiters.splice(index, 1);
          reject(new MutexTimeoutError());
        }, timeoutMs);
      }
    });
  }

  async run<T>(fn: () => Promise<T>, timeoutMs?: number): Promise<T> {
    const release = await this.acquire(timeoutMs);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiters.shift();
      if (next) next();
      else this.held = false;
    };
  }
}

export class MutexTimeoutError extends Error {
  constructor() {
    super('Timed out waiting for the SQLite connection.');
    this.name = 'MutexTimeoutError';
  }
}

// Global for the same reason as transactionContext: one mutex per connection, whichever copy asks.
const sqliteMutexes = ((globalThis as Record<symbol, unknown>)[Symbol.for('nestjs-idempotency:typeorm:sqlite-mutexes')] ??= new WeakMap<
  DataSource,
  Mutex
>()) as WeakMap<DataSource, Mutex>;

/** @internal The one mutex guarding this library's work on a single-connection DataSource. */
export function sqliteMutexOf(dataSource: DataSource): Mutex {
  let mutex = sqliteMutexes.get(dataSource);
  if (!mutex) sqliteMutexes.set(dataSource, (mutex = new Mutex()));
  return mutex;
}

/**
 * Runs `fn` with a query runner suited to the dialect: a pooled connection of its own on
 * PostgreSQL; on SQLite the single connection, taken through the mutex unless the caller
 * already runs inside this library's transaction on the same DataSource (which holds it).
 */
export async function withRunner<T>(dataSource: DataSource, dialect: RecordDialect, fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  if (dialect === 'sqlite') {
    const context = transactionContext.getStore();
    if (context && context.dataSource === dataSource) return fn(context.queryRunner);
    return sqliteMutexOf(dataSource).run(() => withOwnRunner(dataSource, fn));
  }
  return withOwnRunner(dataSource, fn);
}

async function withOwnRunner<T>(dataSource: DataSource, fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  const runner = createGuardedQueryRunner(dataSource);
  try {
    return await fn(runner);
  } finally {
    await runner.release();
  }
}

/**
 * A query runner from a DataSource whose pg clients cannot crash the process.
 *
 * node-postgres reports a connection dropped by the server (`pg_terminate_backend`, a
 * failover) as an 'error' event on the client, and TypeORM leaves some clients without
 * a listener for a moment, so the event can go unhandled and kill the process (found by
 * the reliability harness). The query in flight rejects by itself and the pool discards
 * the broken client, so a listener that ignores the event is all that is needed.
 */
export function createGuardedQueryRunner(dataSource: DataSource): QueryRunner {
  if (!guardedDataSources.has(dataSource)) guardPgClientErrors(dataSource);
  return dataSource.createQueryRunner();
}

const guardedDataSources = new WeakSet<DataSource>();

function guardPgClientErrors(dataSource: DataSource): void {
  const pool = (dataSource.driver as unknown as { master?: PgPoolLike }).master;
  if (!pool || typeof pool.on !== 'function') return;
  guardedDataSources.add(dataSource);
  for (const client of pool._clients ?? []) guardClient(client);
  pool.on('connect', guardClient);
}

function guardClient(client: PgClientLike): void {
  if (!client.listeners('error').includes(ignoreClientError)) client.on('error', ignoreClientError);
}

function ignoreClientError(): void {}

interface PgClientLike {
  on(event: 'error', listener: () => void): unknown;
  listeners(event: 'error'): Function[];
}

interface PgPoolLike {
  _clients?: PgClientLike[];
  on(event: 'connect', listener: (client: PgClientLike) => void): unknown;
}
