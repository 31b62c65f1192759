import type { DataSource, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import type { IdempotencyEventListener } from '../../core/events.js';
import { checkWholeNumber } from '../../core/options.js';
import { DEFAULT_MAX_RESPONSE_BYTES } from '../../core/defaults.js';
import { sizeLimitOf } from '../../core/max-response-bytes.js';
import type { ClaimResult, IdempotencyRecord } from '../../core/record.js';
import type {
  ClaimRequest,
  CompleteRequest,
  StepRequest,
  StoreRequirements,
  TransactionalIdempotencyStore,
  TransactionalRequest,
  TransactionalResult,
} from '../../core/store.js';
import { StoreEventListeners } from '../../core/store-events.js';
import { dialectOf } from '../dialect.js';
import { toRecord } from './dialects/record-row.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './dialects/records-table.js';
import { defaultSchemaOf, dialectFor, serverDialect } from './dialects/registry.js';
import type { RunStatement, SqlDialect } from './dialects/sql-dialect.js';
import type { Statement } from './dialects/statement.js';
import { configurationErrorOf } from './failures.js';
import { sqlExecutorOf, withRunner, type SqlExecutor, type SqlResult } from './sql-executor.js';
import type { PurgeResult, TypeOrmIdempotencyStoreOptions } from './store-options.js';
import { PurgeSchedule } from './purge-schedule.js';
import { SqlStepRecords } from './step-records.js';
import { checkTuning, runRecordTransaction } from './transaction.js';

/** More than one re-read means the key is being hammered by claims, releases and deletes at once. */
const MAX_CLAIM_STATEMENTS = 5;

/**
 * The PostgreSQL or MySQL / MariaDB (shared, multi-instance) or SQLite (embedded)
 * idempotency store, on a TypeORM `DataSource`.
 *
 * - `claim` is one `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE <dead> RETURNING`
 *   statement, whose fallback branch returns the live existing row in the same round trip
 *   (MySQL / MariaDB: one `INSERT ... ON DUPLICATE KEY UPDATE`): see `dialects/`.
 * - `complete`, `release` and `renew` are compare-and-set on the lease token.
 * - Expiry uses the database clock on PostgreSQL and MySQL / MariaDB, so app hosts with skewed clocks agree.
 * - `runTransactional` (used by `@Idempotent({ transactional: true })`) writes the record
 *   in the same transaction as the handler's writes; the handler reaches that
 *   transaction through `getIdempotentEntityManager()`.
 *
 * Create the table with `ensureTable()`, the `CreateIdempotencyRecords1700000000000`
 * migration, or by registering `IdempotencyRecordEntity`.
 */
export class TypeOrmIdempotencyStore implements TransactionalIdempotencyStore {
  private resolvedDialect: SqlDialect | undefined;
  private stepRecords: SqlStepRecords | undefined;
  /** Runs one statement on any pooled connection (made once: no closure per claim). */
  private readonly run: RunStatement = (statement) => this.executor.run(statement);
  /** The background purge, when `purgeInterval` asks for one. */
  private readonly purgeSchedule: PurgeSchedule | undefined;
  /** Set once a statement on the table succeeded: from then on the purge job may run. */
  private ready = false;
  private purging = false;
  private retries = 0;
  private lockRetries = 0;
  private readonly listeners = new StoreEventListeners();
  readonly purgeBatchSize: number;
  /** The largest result the table must hold (`maxResponseBytes`, or its deprecated alias `maxResultBytes`). */
  private readonly maxResponseBytes: number;

  constructor(
    readonly dataSource: DataSource,
    private readonly options: TypeOrmIdempotencyStoreOptions = {},
  ) {
    checkWholeNumber('TypeOrmIdempotencyStore', 'purgeBatchSize', options.purgeBatchSize, { example: '1_000' });
    checkWholeNumber('TypeOrmIdempotencyStore', 'purgeInterval', options.purgeInterval, { unit: 'ms', min: 0, example: '60_000' });
    checkTuning('TypeOrmIdempotencyStore', options);
    // A message names the option the user wrote, the deprecated alias included.
    const size = sizeLimitOf('TypeOrmIdempotencyStore', options);
    checkWholeNumber('TypeOrmIdempotencyStore', size.name, size.value, { example: '1_048_576' });
    this.maxResponseBytes = (size.value as number | undefined) ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.purgeBatchSize = options.purgeBatchSize ?? 1000;
    if (options.purgeInterval) {
      this.purgeSchedule = new PurgeSchedule(
        options.purgeInterval,
        () => this.purgeExpired(),
        options,
        this.listeners,
        () => this.resolvedDialect?.table.quoted,
      );
    }
    // The driver type and the table name are known before the DataSource is initialized:
    // refuse them here, where the stack points at the mistake, rather than at every request.
    if (dataSource?.options?.type !== undefined) {
      dialectOf(dataSource);
      if (!options.entity) parseTableName(options.tableName ?? DEFAULT_RECORDS_TABLE, defaultSchemaOf(dataSource));
    }
  }

  /** The quoted table name the store writes to. */
  get tableName(): string {
    return this.dialect.table.quoted;
  }

  /**
   * How many claims had to run their statement again because a concurrent claim
   * committed between the statement's snapshot and its conflict check (diagnostics).
   */
  get claimRetries(): number {
    return this.retries;
  }

  /**
   * MySQL and MariaDB: how many transactions (`runTransactional`) ran again because InnoDB
   * rolled them back for a deadlock or a lock wait timeout; each one is also reported to
   * the event listeners as a `store_error` (diagnostics).
   */
  get transactionRetries(): number {
    return this.lockRetries;
  }

  /**
   * Boot check (the module calls it when the application initialises): throws
   * `IdempotencyConfigurationError` when the store can never work as configured (an
   * unsupported driver, a records table or entity that does not exist, a table without
   * the store's columns); rethrows anything else (the database is unreachable for now).
   * Starts the purge job once it passes.
   */
  async verify(requirements?: StoreRequirements): Promise<void> {
    if (!this.dataSource.isInitialized) {
      // Every statement would fail with "Driver not Connected" until someone initialises
      // it, and requests would read that as an outage (503) worth retrying.
      throw new IdempotencyConfigurationError(
        'The DataSource of TypeOrmIdempotencyStore is not initialised when the application starts.',
        'Call await dataSource.initialize() before app.init() / app.listen(), or build the store in IdempotencyModule.forRootAsync() ' +
          'from a DataSource that is already initialised (TypeOrmModule provides one).',
      );
    }
    const dialect = this.dialect;
    try {
      await withRunner(this.dataSource, dialect.name, (runner) => runner.query(dialect.probe().sql));
      // MySQL family: learn now which claim the server takes, rather than on the first request.
      const server = await serverDialect(this.dataSource, dialect);
      // The table must hold the largest result any handler of this store may store.
      const bytes = Math.max(this.maxResponseBytes, requirements?.maxResponseBytes ?? 0);
      await server.verify?.(this.dataSource, bytes);
    } catch (error) {
      throw this.failure(error);
    }
    await this.steps.verify();
    this.becomeReady();
  }

  /**
   * Store-wide events (a failed background purge, as `store_error` with `key: ''`) go to
   * `listener`; returns the function that removes it. While at least one listener is
   * registered, the store leaves logging to them.
   */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.listeners.add(listener);
  }

  /** Creates the table and its index when missing (handy for SQLite and tests; use the migration in production). */
  async ensureTable(): Promise<void> {
    const dialect = this.dialect;
    await withRunner(this.dataSource, dialect.name, async (runner) => {
      for (const statement of dialect.createTable()) await runner.query(statement);
    });
    await this.steps.ensureTable();
    this.becomeReady();
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    try {
      const base = this.dialect;
      // MySQL family: the variant of the server behind the DataSource (asked once).
      const dialect = base.forServer ? await base.forServer(this.dataSource) : base;
      const result = dialect.claimSession
        ? await dialect.claimSession(this.dataSource, this.executor, (run) => this.claimRounds(dialect, key, request, run))
        : await this.claimRounds(dialect, key, request, this.run);
      if (!this.ready) this.becomeReady();
      return result;
    } catch (error) {
      throw this.failure(error);
    }
  }

  private async claimRounds(dialect: SqlDialect, key: string, request: ClaimRequest, run: RunStatement): Promise<ClaimResult> {
    for (let round = 0; round < MAX_CLAIM_STATEMENTS; round++) {
      if (round > 0) this.retries++;
      let result: SqlResult;
      try {
        result = await run(dialect.claim(key, request.token, request.leaseTtl, request.fingerprint));
      } catch (error) {
        if (round < MAX_CLAIM_STATEMENTS - 1 && dialect.claimMayRetry(error)) continue;
        throw error;
      }
      const answer = dialect.claimAnswer(key, request, result);
      if (answer === 'again') continue;
      if (answer !== 'read') return answer;
      const existing = await run(dialect.read(key));
      if (existing.rows.length > 0) return { claimed: false, record: toRecord(key, existing.rows[0]) };
      // Released, deleted or expired between the two statements: claim again.
    }
    throw new Error(`TypeOrmIdempotencyStore: the claim of ${key} did not settle after ${MAX_CLAIM_STATEMENTS} statements; retry.`);
  }

  /** How statements reach the database, chosen once per DataSource (see `sqlExecutorOf`). */
  private get executor(): SqlExecutor {
    return sqlExecutorOf(this.dataSource);
  }

  async complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    const dialect = this.dialect;
    let result = request.result;
    if (dialect.storableResult) {
      try {
        result = await dialect.storableResult(this.dataSource, key, result, (event) => this.listeners.emit(event));
      } catch (error) {
        throw this.failure(error);
      }
    }
    return this.write(() => dialect.complete(key, token, result, request.ttl));
  }

  async release(key: string, token: string): Promise<boolean> {
    return this.write(() => this.dialect.release(key, token));
  }

  async renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    return this.write(() => this.dialect.renew(key, token, leaseTtl));
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    try {
      const { rows } = await this.executor.run(this.dialect.read(key));
      if (!this.ready) this.becomeReady();
      return rows.length > 0 ? toRecord(key, rows[0]) : undefined;
    } catch (error) {
      throw this.failure(error);
    }
  }

  async delete(key: string): Promise<boolean> {
    await this.stepCall(() => this.steps.delete(key));
    return this.write(() => this.dialect.delete(key));
  }

  /** Every step record of the key (step-records.ts), one statement on a pooled connection. */
  loadSteps(key: string): Promise<Record<string, string>> {
    return this.stepCall(() => this.steps.load(key));
  }

  /** Records a finished step, fenced by the lease token, on a pooled connection (survives a business rollback). */
  saveStep(key: string, token: string, request: StepRequest): Promise<boolean> {
    return this.stepCall(() => this.steps.save(key, token, request));
  }

  async ping(): Promise<void> {
    await withRunner(this.dataSource, this.dialect.name, (runner) => runner.query('SELECT 1'));
  }

  /**
   * Runs `work` in one transaction with the idempotency record (see
   * `TransactionalIdempotencyStore`). Inside `work`, `getIdempotentEntityManager()` returns
   * the transaction's `EntityManager`. Errors as `runIdempotentTransaction` reports them.
   */
  async runTransactional<T>(
    request: TransactionalRequest,
    work: () => Promise<{ value: T; result: string }>,
  ): Promise<TransactionalResult<T>> {
    const result = await runRecordTransaction(
      this.dataSource,
      this.dialect,
      request,
      () => work(),
      this.options,
      (event) => {
        if (event.type === 'store_error') this.lockRetries++;
        this.listeners.emit(event);
      },
    );
    if (!this.ready) this.becomeReady();
    return result;
  }

  /**
   * Deletes expired records (dead leases and results past their retention) in batches of
   * `purgeBatchSize`. On PostgreSQL and MySQL / MariaDB an advisory lock (per table) makes concurrent purges
   * by several instances skip instead of competing: only one runs at a time, the others
   * return `{ ran: false }`.
   */
  async purgeExpired(): Promise<PurgeResult> {
    if (this.purging) return { ran: false, deleted: 0 };
    this.purging = true;
    try {
      return await this.dialect.withPurgeLock(this.dataSource, (lockHolder) => this.deleteBatches(lockHolder));
    } catch (error) {
      throw this.failure(error);
    } finally {
      this.purging = false;
    }
  }

  /** Stops the purge job and waits for a run in progress. The DataSource stays open: it is yours to destroy. */
  async close(): Promise<void> {
    await this.purgeSchedule?.stop();
  }

  /** Nest lifecycle hook: stops the purge job with the application. */
  async onModuleDestroy(): Promise<void> {
    await this.close();
  }

  private get steps(): SqlStepRecords {
    return (this.stepRecords ??= new SqlStepRecords(this.dataSource, this.dialect, () => this.executor));
  }

  private async stepCall<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw this.failure(error);
    }
  }

  private get dialect(): SqlDialect {
    if (!this.resolvedDialect)
      this.resolvedDialect = dialectFor(this.dataSource, this.resolveTableName(), this.options.preparedStatements !== false);
    return this.resolvedDialect;
  }

  private resolveTableName(): string {
    const entity = this.options.entity;
    if (!entity) return this.options.tableName ?? DEFAULT_RECORDS_TABLE;
    if (this.dataSource.hasMetadata(entity)) return this.dataSource.getMetadata(entity).tablePath;
    // Metadata is built by initialize(): before it, the entity is simply not known yet.
    if (!this.dataSource.isInitialized) {
      throw new Error('TypeOrmIdempotencyStore: the DataSource is not initialized; call dataSource.initialize() before using the store.');
    }
    throw new IdempotencyConfigurationError(
      `The records entity ${entity.name || '(anonymous class)'} given to TypeOrmIdempotencyStore is not registered in its DataSource.`,
      "Add it to the DataSource's entities (the same class object, created once at module level by createIdempotencyRecordEntity).",
    );
  }

  /** The configuration error a failure of the store's SQL stands for, or the failure itself. */
  private failure(error: unknown): unknown {
    const table = this.resolvedDialect?.table;
    return (table && configurationErrorOf(error, table)) ?? error;
  }

  private async write(statement: () => Statement): Promise<boolean> {
    try {
      const { affected } = await this.executor.run(statement());
      if (!this.ready) this.becomeReady();
      return affected > 0;
    } catch (error) {
      throw this.failure(error);
    }
  }

  /** Batches run on `lockHolder` (PostgreSQL, MySQL family), or each through the SQLite mutex so claims interleave. */
  private async deleteBatches(lockHolder: QueryRunner | undefined): Promise<number> {
    const dialect = this.dialect;
    let deleted = 0;
    for (;;) {
      const statement = dialect.purgeBatch(this.purgeBatchSize);
      if (lockHolder && dialect.beforePurgeBatch) await dialect.beforePurgeBatch(lockHolder);
      const { affected } = lockHolder ? await this.executor.runOn(lockHolder, statement) : await this.executor.run(statement);
      deleted += affected;
      if (affected < this.purgeBatchSize) return deleted + (await this.steps.purge(this.purgeBatchSize));
    }
  }

  /**
   * The table answered, so purging can start. Before that a purge could only fail (no
   * table yet: the application has not run its migrations, or verify() is about to say so).
   */
  private becomeReady(): void {
    this.ready = true;
    this.purgeSchedule?.start();
  }
}
