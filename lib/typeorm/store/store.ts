import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import type { IdempotencyEventListener } from '../../core/events.js';
import { checkWholeNumber } from '../../core/options.js';
import { DEFAULT_MAX_RESPONSE_BYTES } from '../../core/defaults.js';
import { sizeLimitOf } from '../../core/max-response-bytes.js';
import type { ClaimResult, IdempotencyRecord } from '../../core/record.js';
import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../../core/outbox-store.js';
import type {
  ClaimRequest,
  CompleteRequest,
  StepRequest,
  StoreRequirements,
  TransactionalIdempotencyStore,
  TransactionalRequest,
  TransactionalResult,
} from '../../core/store.js';
import type { SqlDialect } from '../../sql/dialect.js';
import type { TableFixes } from '../../sql/failures.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { SqlRecords } from '../../sql/records.js';
import { dialectOf } from '../dialect.js';
import { typeormDatabaseOf, type TypeOrmTransaction } from './database.js';
import { defaultSchemaOf, dialectFor } from './dialects/registry.js';
import type { PurgeResult, TypeOrmIdempotencyStoreOptions } from './store-options.js';
import { TYPEORM_STEPS_FIX, TYPEORM_TABLE_FIXES } from './table-fixes.js';
import { checkTuning, typeormTransactionParts } from './transaction.js';

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
 *   transaction through `getIdempotentTransaction()`.
 *
 * Create the table with `ensureTable()`, the `CreateIdempotencyRecords1700000000000`
 * migration, or by registering `IdempotencyRecordEntity`.
 */
export class TypeOrmIdempotencyStore implements TransactionalIdempotencyStore {
  private resolvedDialect: SqlDialect | undefined;
  /** The record logic, shared with the other SQL stores (lib/sql/records.ts). */
  private readonly records: SqlRecords<TypeOrmTransaction>;
  readonly purgeBatchSize: number;

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
    this.purgeBatchSize = options.purgeBatchSize ?? 1000;
    this.records = new SqlRecords(typeormDatabaseOf(dataSource), () => this.dialect, {
      owner: 'TypeOrmIdempotencyStore',
      fixes: this.tableFixes(),
      stepsFix: TYPEORM_STEPS_FIX,
      maxResponseBytes: (size.value as number | undefined) ?? DEFAULT_MAX_RESPONSE_BYTES,
      purgeBatchSize: this.purgeBatchSize,
      purgeInterval: options.purgeInterval,
      reporting: options,
      tuning: options,
    });
    // The driver type and the table name are known before the DataSource is initialized:
    // refuse them here, where the stack points at the mistake, rather than at every request.
    if (dataSource?.options?.type !== undefined) {
      dialectOf(dataSource);
      if (!options.entity) parseTableName(options.tableName ?? DEFAULT_RECORDS_TABLE, defaultSchemaOf(dataSource));
    }
  }

  /**
   * How the messages of a missing or foreign table tell the user to create it (a store that
   * owns its DataSource has its own way). Called by the constructor.
   * @internal
   */
  protected tableFixes(): TableFixes {
    return TYPEORM_TABLE_FIXES;
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
    return this.records.claimRetries;
  }

  /**
   * MySQL and MariaDB: how many transactions (`runTransactional`) ran again because InnoDB
   * rolled them back for a deadlock or a lock wait timeout; each one is also reported to
   * the event listeners as a `store_error` (diagnostics).
   */
  get transactionRetries(): number {
    return this.records.transactionRetries;
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
    await this.records.verify(requirements);
  }

  /**
   * Store-wide events (a failed background purge, as `store_error` with `key: ''`) go to
   * `listener`; returns the function that removes it. While at least one listener is
   * registered, the store leaves logging to them.
   */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.records.addEventListener(listener);
  }

  /** Creates the table and its index when missing (handy for SQLite and tests; use the migration in production). */
  ensureTable(): Promise<void> {
    return this.records.ensureTable();
  }

  claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    return this.records.claim(key, request);
  }

  complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    return this.records.complete(key, token, request);
  }

  release(key: string, token: string): Promise<boolean> {
    return this.records.release(key, token);
  }

  renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    return this.records.renew(key, token, leaseTtl);
  }

  get(key: string): Promise<IdempotencyRecord | undefined> {
    return this.records.get(key);
  }

  delete(key: string): Promise<boolean> {
    return this.records.delete(key);
  }

  /** Every step record of the key (lib/sql/step-records.ts), one statement on a pooled connection. */
  loadSteps(key: string): Promise<Record<string, string>> {
    return this.records.loadSteps(key);
  }

  /** Records a finished step, fenced by the lease token, on a pooled connection (survives a business rollback). */
  saveStep(key: string, token: string, request: StepRequest): Promise<boolean> {
    return this.records.saveStep(key, token, request);
  }

  ping(): Promise<void> {
    return this.records.ping();
  }

  /** Outbox (`IdempotencyOutbox`): claims staged executions for a relay (FOR UPDATE SKIP LOCKED and a claim lease). */
  claimOutbox(request: OutboxClaimRequest): Promise<readonly ClaimedOutbox[]> {
    return this.records.outbox.claim(request);
  }

  /** Outbox: records what a relay sent of a claimed execution and ends its claim. */
  settleOutbox(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    return this.records.outbox.settle(id, owner, settlement);
  }

  /** Outbox: what waits to be sent. */
  outboxBacklog(): Promise<OutboxBacklog> {
    return this.records.outbox.backlog();
  }

  /** Outbox: deletes up to `limit` executions sent more than `retention` ms ago (the relays call it). */
  purgeOutbox(retention: number, limit: number): Promise<number> {
    return this.records.outbox.purgeSent(retention, limit);
  }

  /** Outbox: false on a database whose dialect has no outbox yet (SQLite; PostgreSQL, MySQL and MariaDB have it). */
  get outboxAvailable(): boolean {
    try {
      return this.records.outbox.available;
    } catch {
      return false;
    }
  }

  /**
   * Runs `work` in one transaction with the idempotency record (see
   * `TransactionalIdempotencyStore`). Inside `work`, `getIdempotentTransaction()` returns
   * the transaction's `EntityManager`. Errors as `runIdempotentTransaction` reports them.
   */
  runTransactional<T>(request: TransactionalRequest, work: () => Promise<{ value: T; result: string }>): Promise<TransactionalResult<T>> {
    const parts = typeormTransactionParts(this.dataSource, () => work());
    return this.records.runTransactional(request, parts.work, parts.nested);
  }

  /**
   * Deletes expired records (dead leases and results past their retention) in batches of
   * `purgeBatchSize`. On PostgreSQL and MySQL / MariaDB an advisory lock (per table) makes concurrent purges
   * by several instances skip instead of competing: only one runs at a time, the others
   * return `{ ran: false }`.
   */
  purgeExpired(): Promise<PurgeResult> {
    return this.records.purgeExpired();
  }

  /** Stops the purge job and waits for a run in progress. The DataSource stays open: it is yours to destroy. */
  close(): Promise<void> {
    return this.records.close();
  }

  /** Nest lifecycle hook: stops the purge job with the application. */
  async onModuleDestroy(): Promise<void> {
    await this.close();
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
}
