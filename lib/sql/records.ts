import type { IdempotencyEventListener } from '../core/events.js';
import type { StagedOutbox } from '../core/outbox-store.js';
import type { ClaimResult, IdempotencyRecord } from '../core/record.js';
import type {
  ClaimRequest,
  CompleteRequest,
  StepRequest,
  StoreRequirements,
  TransactionalRequest,
  TransactionalResult,
} from '../core/store.js';
import { StoreEventListeners } from '../core/store-events.js';
import type { ClaimAnswer, RunStatement, SqlDialect } from './dialect.js';
import { toRecord } from './dialects/record-row.js';
import { configurationErrorOf, type TableFixes } from './failures.js';
import type { SqlConnection, SqlDatabase, SqlTransaction } from './port.js';
import { PurgeBatchSize } from './purge-batch-size.js';
import { PurgeSchedule, type PurgeReporting, type PurgeResult } from './purge-schedule.js';
import type { SqlResult, Statement } from './statement.js';
import { plain } from './statement.js';
import { SqlStepRecords } from './step-records.js';
import { SqlOutbox } from './outbox-records.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS } from './deadline.js';
import { boundedDatabase, runRecordTransaction, serverDialect, type SqlTransactionTuning } from './transaction.js';

/** More than one re-read means the key is being hammered by claims, releases and deletes at once. */
const MAX_CLAIM_STATEMENTS = 5;

/** What a SQL store tells the shared record logic about itself. */
export interface SqlRecordsConfig {
  /** The store's class name, in messages. */
  readonly owner: string;
  /** The hints of a missing or foreign records table. */
  readonly fixes: TableFixes;
  /** The hint of a missing steps table. */
  readonly stepsFix: string;
  /** The largest result the table must hold (`maxResponseBytes`). */
  readonly maxResponseBytes: number;
  readonly purgeBatchSize: number;
  /** `purgeInterval`, ms; undefined or 0: no background purge. */
  readonly purgeInterval: number | undefined;
  readonly reporting: PurgeReporting;
  readonly tuning: SqlTransactionTuning;
}

/**
 * The record logic of every SQL store (TypeORM, Prisma, Drizzle), once, on the port
 * (`SqlDatabase`) and a dialect: the claim (one statement, re-run only when the dialect
 * says it settled nothing), the compare-and-set writes, the read, the steps, the purge
 * under its lock and schedule, the boot checks, and the idempotent transaction. A store
 * class keeps only what its ORM adds: how it reaches the database, its options and errors.
 */
export class SqlRecords<Tx extends SqlTransaction = SqlTransaction> {
  private stepRecords: SqlStepRecords | undefined;
  private outboxRecords: SqlOutbox | undefined;
  /** Runs one statement on any pooled connection (made once: no closure per claim). */
  private readonly run: RunStatement = (statement) => this.db.run(statement);
  private readonly purgeSchedule: PurgeSchedule | undefined;
  /** Set once a statement on the table succeeded: from then on the purge job may run. */
  private ready = false;
  private purging = false;
  private purgeBatchSize: PurgeBatchSize | undefined;
  private retries = 0;
  private lockRetries = 0;
  readonly listeners = new StoreEventListeners();

  private boundDb: SqlDatabase<Tx> | undefined;

  /** The database under the client-side deadline (`statementTimeout`; none on SQLite), once the dialect is known. */
  get db(): SqlDatabase<Tx> {
    if (this.boundDb) return this.boundDb;
    let dialect: SqlDialect;
    try {
      dialect = this.dialectOf();
    } catch {
      // Not known yet (an entity's table before initialize()): the statement fails for that reason anyway.
      return this.rawDb;
    }
    return (this.boundDb = boundedDatabase(this.rawDb, dialect, this.config.tuning.statementTimeout));
  }

  constructor(
    private readonly rawDb: SqlDatabase<Tx>,
    /** The dialect on the records table (asked on first use: TypeORM knows an entity's table only then). */
    private readonly dialectOf: () => SqlDialect,
    private readonly config: SqlRecordsConfig,
  ) {
    if (config.purgeInterval) {
      this.purgeSchedule = new PurgeSchedule(
        config.purgeInterval,
        () => this.purgeExpired(),
        config.reporting,
        this.listeners,
        () => this.knownDialect?.table.quoted,
        config.owner,
      );
    }
  }

  private knownDialect: SqlDialect | undefined;

  get dialect(): SqlDialect {
    return (this.knownDialect ??= this.dialectOf());
  }

  /** Claims that ran their statement again (see the stores' `claimRetries`). */
  get claimRetries(): number {
    return this.retries;
  }

  /** Idempotent transactions that ran again after an InnoDB deadlock or lock wait timeout. */
  get transactionRetries(): number {
    return this.lockRetries;
  }

  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.listeners.add(listener);
  }

  /** Boot check: the table answers with the store's columns, the server fits, the steps table exists; then the purge job starts. */
  async verify(requirements?: StoreRequirements): Promise<void> {
    const dialect = this.dialect;
    try {
      // On a held connection, as every boot check and DDL here: where the ORM reports a
      // failure its own way (TypeORM's QueryFailedError) the user sees that error as the cause.
      await this.db.withConnection((connection) => connection.run(dialect.probe()));
      // MySQL family: learn now which claim the server takes, rather than on the first request.
      const server = await serverDialect(this.db, dialect);
      // The table must hold the largest result any handler of this store may store.
      const bytes = Math.max(this.config.maxResponseBytes, requirements?.maxResponseBytes ?? 0);
      await server.verify?.(this.db, bytes);
    } catch (error) {
      throw this.failure(error);
    }
    await this.steps.verify();
    this.becomeReady();
  }

  async ensureTable(): Promise<void> {
    await this.db.withConnection(async (connection) => {
      for (const statement of this.dialect.createTable()) await connection.run(plain(statement));
    });
    await this.steps.ensureTable();
    await this.outbox.ensureTable();
    this.becomeReady();
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    try {
      const base = this.dialect;
      // MySQL family: the variant of the server behind the database (asked once).
      const dialect = base.forServer ? await base.forServer(this.db) : base;
      const result = dialect.claimSession
        ? await dialect.claimSession(this.db, (run) => this.claimRounds(dialect, key, request, run))
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
      let answer: ClaimAnswer;
      try {
        answer = dialect.claimAnswer(key, request, await run(dialect.claim(key, request.token, request.leaseTtl, request.fingerprint)));
        if (typeof answer === 'object' && 'followUp' in answer) answer = answer.answer(await run(answer.followUp));
      } catch (error) {
        if (round < MAX_CLAIM_STATEMENTS - 1 && dialect.claimMayRetry(error)) continue;
        throw error;
      }
      if (answer === 'again') continue;
      if (answer !== 'read') return answer;
      const existing = await run(dialect.read(key));
      if (existing.rows.length > 0) {
        const record = toRecord(key, existing.rows[0]);
        // Our own lease (MySQL 8 through a driver that does not report the insert id): claimed.
        if (record.status === 'in_progress' && record.leaseToken === request.token) return { claimed: true, record };
        return { claimed: false, record };
      }
      // Released, deleted or expired between the two statements: claim again.
    }
    throw new Error(`${this.config.owner}: the claim of ${key} did not settle after ${MAX_CLAIM_STATEMENTS} statements; retry.`);
  }

  async complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    const dialect = this.dialect;
    let result = request.result;
    if (dialect.storableResult) {
      try {
        result = await dialect.storableResult(this.db, key, result, (event) => this.listeners.emit(event));
      } catch (error) {
        throw this.failure(error);
      }
    }
    if (request.outbox) return this.completeWithOutbox(dialect.complete(key, token, result, request.ttl), key, request.outbox);
    return this.write(() => dialect.complete(key, token, result, request.ttl));
  }

  /** The completion and the execution's staged messages, in one transaction. */
  private async completeWithOutbox(complete: Statement, key: string, staged: StagedOutbox): Promise<boolean> {
    try {
      // PostgreSQL: one statement; elsewhere a transaction of the two.
      const done = await this.outbox.completeAndStage(complete, key, staged);
      if (done !== undefined) return done;
      return await this.db.transaction(undefined, async (tx) => {
        const { affected } = await tx.run(complete);
        if (affected > 0) await this.outbox.stage(tx, key, staged);
        return affected > 0;
      });
    } catch (error) {
      throw this.failure(error);
    }
  }

  /** The outbox table's statements (outbox-records.ts), made on first use. */
  get outbox(): SqlOutbox {
    return (this.outboxRecords ??= new SqlOutbox(this.db, this.dialect, this.config.owner));
  }

  release(key: string, token: string): Promise<boolean> {
    return this.write(() => this.dialect.release(key, token));
  }

  renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    return this.write(() => this.dialect.renew(key, token, leaseTtl));
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    try {
      const { rows } = await this.db.run(this.dialect.read(key));
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

  loadSteps(key: string): Promise<Record<string, string>> {
    return this.stepCall(() => this.steps.load(key));
  }

  saveStep(key: string, token: string, request: StepRequest): Promise<boolean> {
    return this.stepCall(() => this.steps.save(key, token, request));
  }

  async ping(): Promise<void> {
    await this.db.withConnection((connection) => connection.run(plain('SELECT 1')));
  }

  /**
   * Runs `work` in one transaction with the record (see `runRecordTransaction`). `db`: a
   * nested call's database (TypeORM: savepoints of the outer transaction).
   */
  async runTransactional<T>(
    request: TransactionalRequest,
    work: (tx: Tx) => Promise<{ value: T; result: string }>,
    nested?: SqlDatabase<Tx>,
  ): Promise<TransactionalResult<T>> {
    const result = await runRecordTransaction({
      db: nested ?? this.db,
      dialect: this.dialect,
      request,
      work,
      tuning: this.config.tuning,
      nested: nested !== undefined,
      owner: this.config.owner,
      fixes: this.config.fixes,
      onEvent: (event) => {
        if (event.type === 'store_error') this.lockRetries++;
        this.listeners.emit(event);
      },
    });
    if (!this.ready) this.becomeReady();
    return result;
  }

  /** Deletes expired records (and steps) in batches, under the table's purge lock; `{ ran: false }` when another instance holds it. */
  async purgeExpired(): Promise<PurgeResult> {
    if (this.purging) return { ran: false, deleted: 0 };
    this.purging = true;
    try {
      return await this.dialect.withPurgeLock(this.db, (lockHolder) => this.deleteBatches(lockHolder));
    } catch (error) {
      throw this.failure(error);
    } finally {
      this.purging = false;
    }
  }

  /** Stops the purge job and waits for a run in progress. */
  async close(): Promise<void> {
    await this.purgeSchedule?.stop();
  }

  /** The configuration error a failure of the store's SQL stands for, or the failure itself. */
  failure(error: unknown): unknown {
    const table = this.knownDialect?.table;
    return (table && configurationErrorOf(error, table, this.config.fixes)) ?? error;
  }

  private get steps(): SqlStepRecords {
    return (this.stepRecords ??= new SqlStepRecords(this.db, this.dialect, this.config.owner, this.config.stepsFix));
  }

  private async stepCall<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      throw this.failure(error);
    }
  }

  private async write(statement: () => Statement): Promise<boolean> {
    try {
      const { affected } = await this.db.run(statement());
      if (!this.ready) this.becomeReady();
      return affected > 0;
    } catch (error) {
      throw this.failure(error);
    }
  }

  /**
   * Batches run on `lockHolder` (PostgreSQL, MySQL family), or each on its own (SQLite:
   * through its mutex, so claims interleave), each sized by `purgeBatch` from how long the
   * last ones took, so none comes near the statement deadline.
   */
  private async deleteBatches(lockHolder: SqlConnection | undefined): Promise<number> {
    // The server's variant: MariaDB's batches resume where the last one stopped, MySQL's cannot.
    const dialect = await serverDialect(this.db, this.dialect);
    const size = this.purgeBatch;
    let deleted = 0;
    let from: number | undefined;
    for (;;) {
      const limit = size.current;
      const statement = dialect.purgeBatch(limit, from);
      if (lockHolder && dialect.beforePurgeBatch) await dialect.beforePurgeBatch(lockHolder);
      const startedAt = Date.now();
      let result: SqlResult;
      try {
        result = await (lockHolder ?? this.db).run(statement);
      } catch (error) {
        size.failed();
        throw error;
      }
      size.finished(Date.now() - startedAt);
      const { affected } = result;
      if (dialect.purgeResume) from = dialect.purgeResume(result) ?? from;
      deleted += affected;
      if (affected < limit) return deleted + (await this.steps.purge(size.current));
    }
  }

  /** The purge's batch size, kept between purges (its deadline known once the dialect is: none on SQLite). */
  private get purgeBatch(): PurgeBatchSize {
    return (this.purgeBatchSize ??= new PurgeBatchSize(
      this.config.purgeBatchSize,
      this.dialect.name === 'sqlite' ? 0 : (this.config.tuning.statementTimeout ?? DEFAULT_STATEMENT_TIMEOUT_MS),
    ));
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
