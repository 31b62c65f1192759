import { DEFAULT_MAX_RESPONSE_BYTES } from '../core/defaults.js';
import type { IdempotencyEventListener } from '../core/events.js';
import { checkWholeNumber } from '../core/options.js';
import type { ClaimResult, IdempotencyRecord } from '../core/record.js';
import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement } from '../core/outbox-store.js';
import type {
  ClaimRequest,
  CompleteRequest,
  StepRequest,
  StoreRequirements,
  TransactionalIdempotencyStore,
  TransactionalRequest,
  TransactionalResult,
} from '../core/store.js';
import type { TableFixes } from '../sql/failures.js';
import { SqlRecords } from '../sql/records.js';
import { DrizzleSqlDatabase, type DrizzleSqlTransaction } from './drizzle-database.js';
import { DRIZZLE_STEPS_FIX, DRIZZLE_TABLE_FIXES, recordDialectOf } from './record-dialect.js';
import type { DrizzleIdempotencyStoreOptions, PurgeResult } from './store-options.js';
import { nestedDatabaseOf, runInTransactionContext } from './transaction-run.js';
import { checkDrizzleTuning } from './tuning.js';

const OWNER = 'DrizzleIdempotencyStore';

/**
 * The PostgreSQL or MySQL / MariaDB idempotency store on a Drizzle database (drizzle-orm
 * on node-postgres or on mysql2, made on a pool). The same statements and guarantees as
 * the TypeORM store (lib/sql/):
 *
 * - `claim` is one atomic statement (PostgreSQL `INSERT ... ON CONFLICT ... RETURNING`,
 *   MySQL / MariaDB `INSERT ... ON DUPLICATE KEY UPDATE`): claim 1 round trip,
 *   complete 1, replay 1;
 * - `complete`, `release` and `renew` are compare-and-set on the lease token; expiry uses
 *   the database clock, so app hosts with skewed clocks agree;
 * - `runTransactional` (used by `@Idempotent({ transactional: true })`) writes the record in
 *   the same Drizzle transaction as the handler's writes; the handler reaches it through
 *   `getIdempotentTransaction()`.
 *
 * Create the tables from their Drizzle definitions (`idempotencyPgTables()` /
 * `idempotencyMysqlTables()` in your schema, then drizzle-kit), or with `ensureTable()`.
 */
export class DrizzleIdempotencyStore implements TransactionalIdempotencyStore {
  /** The record logic, shared with the other SQL stores (lib/sql/records.ts). */
  private readonly records: SqlRecords<DrizzleSqlTransaction>;
  private readonly database: DrizzleSqlDatabase;
  readonly purgeBatchSize: number;

  constructor(
    readonly db: object,
    options: DrizzleIdempotencyStoreOptions = {},
  ) {
    checkWholeNumber(OWNER, 'purgeBatchSize', options.purgeBatchSize, { example: '1_000' });
    checkWholeNumber(OWNER, 'purgeInterval', options.purgeInterval, { unit: 'ms', min: 0, example: '60_000' });
    checkWholeNumber(OWNER, 'maxResponseBytes', options.maxResponseBytes, { example: '1_048_576' });
    checkDrizzleTuning(OWNER, options);
    // Refused here, where the stack points at the mistake, rather than at every request.
    this.database = DrizzleSqlDatabase.of(db, OWNER);
    const dialect = recordDialectOf(this.database, options.tableName, options.preparedStatements !== false);
    this.purgeBatchSize = options.purgeBatchSize ?? 1000;
    this.records = new SqlRecords(this.database, () => dialect, {
      owner: OWNER,
      fixes: this.tableFixes(),
      stepsFix: DRIZZLE_STEPS_FIX,
      maxResponseBytes: options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
      purgeBatchSize: this.purgeBatchSize,
      purgeInterval: options.purgeInterval,
      reporting: options,
      tuning: options,
    });
  }

  /**
   * How the messages of a missing or foreign table tell the user to create it (a store that
   * owns its pool has its own way). Called by the constructor.
   * @internal
   */
  protected tableFixes(): TableFixes {
    return DRIZZLE_TABLE_FIXES;
  }

  /** The quoted table name the store writes to. */
  get tableName(): string {
    return this.records.dialect.table.quoted;
  }

  /** How many claims had to run their statement again because a concurrent claim committed meanwhile (diagnostics). */
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
   * `IdempotencyConfigurationError` when the records table or its steps table does not
   * exist or lacks the store's columns (MySQL family: a result column or
   * `max_allowed_packet` too small, a case-insensitive key); rethrows anything else (the
   * database is unreachable for now). Starts the purge job once it passes.
   */
  verify(requirements?: StoreRequirements): Promise<void> {
    return this.records.verify(requirements);
  }

  /**
   * Store-wide events (a failed background purge, as `store_error` with `key: ''`) go to
   * `listener`; returns the function that removes it.
   */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.records.addEventListener(listener);
  }

  /** Creates both tables and their indexes when missing (quick starts and tests; use drizzle-kit migrations in production). */
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

  /** Every step record of the key, one statement on a pooled connection. */
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
   * Runs `work` in one Drizzle transaction with the idempotency record (see
   * `TransactionalIdempotencyStore`). Inside `work`, `getIdempotentTransaction()` returns the
   * transaction's `tx`. Inside another idempotent transaction on the same database, it joins
   * that one through a savepoint.
   */
  runTransactional<T>(request: TransactionalRequest, work: () => Promise<{ value: T; result: string }>): Promise<TransactionalResult<T>> {
    return this.records.runTransactional(request, (tx) => runInTransactionContext(this.db, tx, work), nestedDatabaseOf(this.database));
  }

  /**
   * Deletes expired records (dead leases and results past their retention) and step records
   * in batches of `purgeBatchSize`, under an advisory lock per table: concurrent purges by
   * several instances skip instead of competing (`{ ran: false }`).
   */
  purgeExpired(): Promise<PurgeResult> {
    return this.records.purgeExpired();
  }

  /** Stops the purge job and waits for a run in progress. The database and its pool stay open: they are yours to end. */
  close(): Promise<void> {
    return this.records.close();
  }

  /** Nest lifecycle hook: stops the purge job with the application. */
  async onModuleDestroy(): Promise<void> {
    await this.close();
  }
}
