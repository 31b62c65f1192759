import { DEFAULT_MAX_RESPONSE_BYTES } from '../core/defaults.js';
import { IdempotencyConfigurationError } from '../core/errors.js';
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
import type { SqlDialect } from '../sql/dialect.js';
import { mysqlDialect } from '../sql/dialects/mysql.js';
import { postgresDialect } from '../sql/dialects/postgres.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../sql/dialects/records-table.js';
import { SqlRecords } from '../sql/records.js';
import type { PurgeResult } from '../sql/purge-schedule.js';
import type { SqlDatabase } from '../sql/port.js';
import { nestedPrismaDatabase, PrismaDatabase, type PrismaTransaction } from './database.js';
import { providerOf, type PrismaClientLike, type PrismaProvider } from './prisma-client.js';
import type { PrismaIdempotencyStoreOptions, PrismaTransactionTuning } from './store-options.js';
import { PRISMA_STEPS_FIX, PRISMA_TABLE_FIXES } from './table-fixes.js';
import { prismaTransactionContext } from './transaction-context.js';

/**
 * The PostgreSQL or MySQL / MariaDB idempotency store on a `PrismaClient` (Prisma 7 with
 * a driver adapter): the TypeORM store's statements and round trips (claim 1, complete 1,
 * replay 1), through `$queryRawUnsafe` / `$executeRawUnsafe`, with the database's clock.
 * `runTransactional` (used by `@Idempotent({ transactional: true })`) writes the record
 * in the same interactive transaction as the handler's writes, which the handler reaches
 * through `getIdempotentTransaction()`.
 *
 * Create the tables with `ensureTable()`, the models of docs/prisma.md, or the SQL of
 * `prismaIdempotencyMigrationSql()`.
 */
export class PrismaIdempotencyStore implements TransactionalIdempotencyStore {
  /** @internal */
  readonly database: PrismaDatabase;
  private readonly records: SqlRecords<PrismaTransaction>;
  readonly provider: PrismaProvider;
  private readonly dialect: SqlDialect;

  constructor(
    readonly prisma: PrismaClientLike,
    options: PrismaIdempotencyStoreOptions = {},
  ) {
    if (!prisma || typeof prisma.$queryRawUnsafe !== 'function' || typeof prisma.$transaction !== 'function') {
      throw new IdempotencyConfigurationError(
        'PrismaIdempotencyStore needs a PrismaClient.',
        'Pass the client itself: new PrismaIdempotencyStore(prisma), with prisma = new PrismaClient({ adapter }).',
      );
    }
    checkOptions('PrismaIdempotencyStore', options);
    checkWholeNumber('PrismaIdempotencyStore', 'purgeBatchSize', options.purgeBatchSize, { example: '1_000' });
    checkWholeNumber('PrismaIdempotencyStore', 'purgeInterval', options.purgeInterval, { unit: 'ms', min: 0, example: '60_000' });
    checkWholeNumber('PrismaIdempotencyStore', 'maxResponseBytes', options.maxResponseBytes, { example: '1_048_576' });
    this.provider = prismaProviderOf(prisma, options.provider);
    this.dialect = prismaDialect(this.provider, options.tableName);
    this.database = prismaDatabaseOf(prisma, this.provider, options);
    this.records = new SqlRecords(this.database, () => this.dialect, {
      owner: 'PrismaIdempotencyStore',
      fixes: PRISMA_TABLE_FIXES,
      stepsFix: PRISMA_STEPS_FIX,
      maxResponseBytes: options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
      purgeBatchSize: options.purgeBatchSize ?? 1000,
      purgeInterval: options.purgeInterval,
      reporting: options,
      tuning: options,
    });
  }

  /** The quoted table name the store writes to. */
  get tableName(): string {
    return this.dialect.table.quoted;
  }

  /** Claims that ran their statement again (a concurrent claim committed in between; diagnostics). */
  get claimRetries(): number {
    return this.records.claimRetries;
  }

  /** MySQL and MariaDB: transactions that ran again after an InnoDB deadlock or lock wait timeout (diagnostics). */
  get transactionRetries(): number {
    return this.records.transactionRetries;
  }

  /**
   * Boot check (the module calls it when the application initialises): throws
   * `IdempotencyConfigurationError` when the tables do not exist or lack the store's
   * columns (with the fix in the hint); rethrows anything else (the database is
   * unreachable for now). Starts the purge job once it passes.
   */
  verify(requirements?: StoreRequirements): Promise<void> {
    return this.records.verify(requirements);
  }

  /** Store-wide events (a failed background purge) go to `listener`; returns the function that removes it. */
  addEventListener(listener: IdempotencyEventListener): () => void {
    return this.records.addEventListener(listener);
  }

  /** Creates the records and steps tables when missing (quick starts and tests; use a migration in production). */
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

  /** Every step record of the key, one statement. */
  loadSteps(key: string): Promise<Record<string, string>> {
    return this.records.loadSteps(key);
  }

  /** Records a finished step, fenced by the lease token, outside any business transaction (survives its rollback). */
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
   * Runs `work` in one interactive transaction with the idempotency record (see
   * `TransactionalIdempotencyStore`); inside it, `getIdempotentTransaction()` returns the
   * transaction client. Errors as `runIdempotentTransaction` reports them.
   */
  runTransactional<T>(request: TransactionalRequest, work: () => Promise<{ value: T; result: string }>): Promise<TransactionalResult<T>> {
    const parts = prismaTransactionParts(this.prisma, this.database, work);
    return this.records.runTransactional(request, parts.work, parts.nested);
  }

  /** Deletes expired records and steps in batches of `purgeBatchSize`, one instance at a time (advisory lock). */
  purgeExpired(): Promise<PurgeResult> {
    return this.records.purgeExpired();
  }

  /** Stops the purge job and waits for a run in progress. The client stays connected: it is yours to disconnect. */
  close(): Promise<void> {
    return this.records.close();
  }

  /** Nest lifecycle hook: stops the purge job with the application. */
  async onModuleDestroy(): Promise<void> {
    await this.close();
  }
}

/** @internal The provider behind `prisma`, given or read; refuses the ones the store does not speak. */
export function prismaProviderOf(prisma: object, given: PrismaProvider | undefined): PrismaProvider {
  const provider = given ?? providerOf(prisma);
  if (provider === 'postgresql' || provider === 'mysql') return provider;
  throw new IdempotencyConfigurationError(
    provider === undefined
      ? 'PrismaIdempotencyStore cannot tell which database the PrismaClient talks to.'
      : `PrismaIdempotencyStore does not support Prisma's '${provider}' provider.`,
    provider === undefined
      ? "Pass { provider: 'postgresql' } or { provider: 'mysql' } (MySQL and MariaDB)."
      : 'Use PostgreSQL (@prisma/adapter-pg) or MySQL / MariaDB (@prisma/adapter-mariadb); for other databases use the Redis store.',
  );
}

const dialects = new Map<string, SqlDialect>();

/** @internal The dialect of `provider` on a table (shared by the store and `runIdempotentTransaction`). */
export function prismaDialect(provider: PrismaProvider, tableName: string = DEFAULT_RECORDS_TABLE): SqlDialect {
  const cacheKey = `${provider}\0${tableName}`;
  let dialect = dialects.get(cacheKey);
  if (!dialect) {
    const table = parseTableName(tableName);
    // Prisma names no prepared statements: the PostgreSQL statements go unnamed.
    dialect = provider === 'mysql' ? mysqlDialect(table) : postgresDialect(table, false);
    dialects.set(cacheKey, dialect);
  }
  return dialect;
}

/** @internal The port on `prisma` with the transaction options of `tuning`. */
export function prismaDatabaseOf(prisma: PrismaClientLike, provider: PrismaProvider, tuning: PrismaTransactionTuning): PrismaDatabase {
  return new PrismaDatabase(prisma, provider, { maxWait: tuning.maxWait, timeout: tuning.timeout });
}

/** @internal The Prisma side of an idempotent transaction: the nested database inside an outer one on the same client, and the work in its context. */
export function prismaTransactionParts<T>(
  prisma: object,
  db: PrismaDatabase,
  work: (tx: PrismaTransaction['client']) => Promise<{ value: T; result: string }>,
): { nested: SqlDatabase<PrismaTransaction> | undefined; work: (tx: PrismaTransaction) => Promise<{ value: T; result: string }> } {
  const outer = prismaTransactionContext.getStore();
  return {
    nested: outer?.client === prisma ? nestedPrismaDatabase(db, outer.tx) : undefined,
    work: (tx) => prismaTransactionContext.run({ client: prisma, tx: tx.client }, () => work(tx.client)),
  };
}

/** @internal Refuses tuning values outside the one rule for numeric options. */
export function checkOptions(owner: string, tuning: PrismaTransactionTuning): void {
  checkWholeNumber(owner, 'waitTimeout', tuning.waitTimeout, { unit: 'ms', min: 0, example: '4_000' });
  checkWholeNumber(owner, 'statementTimeout', tuning.statementTimeout, { unit: 'ms', min: 0, example: '4_000' });
  checkWholeNumber(owner, 'maxWait', tuning.maxWait, { unit: 'ms', min: 0, example: '2_000' });
  checkWholeNumber(owner, 'timeout', tuning.timeout, { unit: 'ms', example: '10_000' });
}
