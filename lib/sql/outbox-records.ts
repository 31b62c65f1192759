import { IdempotencyConfigurationError } from '../core/errors.js';
import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement, StagedOutbox } from '../core/outbox-store.js';
import type { SqlDialect } from './dialect.js';
import { isMissingTableError } from './failures.js';
import { nameOf } from './dialects/records-table.js';
import { outboxStatements, outboxTableOf, type OutboxStatements } from './outbox-table.js';
import type { SqlConnection, SqlDatabase } from './port.js';
import { plain, type Statement } from './statement.js';

/**
 * The outbox of a SQL store (outbox-table.ts): staged in the transaction that completes
 * the record (an idempotent transaction's, or one of its own around `complete`), claimed,
 * settled and purged by the relay on pooled connections.
 */
export class SqlOutbox {
  private readonly sql: OutboxStatements | undefined;
  private readonly table: string;

  constructor(
    private readonly db: SqlDatabase,
    private readonly dialect: SqlDialect,
    private readonly owner: string,
  ) {
    this.sql = outboxStatements(dialect.name, dialect.table);
    this.table = nameOf(outboxTableOf(dialect.table));
  }

  /** False where the outbox is not built for the dialect yet: `emit()` is refused there. */
  get available(): boolean {
    return this.sql !== undefined;
  }

  private get statements(): OutboxStatements {
    if (this.sql) return this.sql;
    throw new IdempotencyConfigurationError(
      `${this.owner} has no outbox on ${this.dialect.name} yet.`,
      'Use PostgreSQL, MySQL or MariaDB for the outbox, or the memory store.',
    );
  }

  /**
   * The completion and the staging in one statement, where the dialect has one (PostgreSQL):
   * true when the record completed. Undefined where it has none (the caller then runs both
   * in a transaction of their own).
   */
  async completeAndStage(complete: Statement, key: string, staged: StagedOutbox): Promise<boolean | undefined> {
    const statement = this.statements.completeAndStage?.(complete, key, staged);
    if (!statement) return undefined;
    const { rows } = await this.db.run(statement);
    return Number(rows[0]?.completed ?? 0) > 0;
  }

  /** Stages an execution's messages on `connection`, inside the transaction that completes its record. */
  async stage(connection: SqlConnection, key: string, staged: StagedOutbox): Promise<void> {
    await connection.run(this.statements.insert(key, staged));
  }

  async claim(request: OutboxClaimRequest): Promise<ClaimedOutbox[]> {
    const sql = this.statements;
    const rows = sql.claim
      ? (await this.db.run(sql.claim(request.owner, request.limit, request.claimTtl))).rows
      : await this.claimInSteps(sql, request);
    return rows
      .map((row) => ({
        id: String(row.id),
        messages: String(row.messages),
        next: Number(row.next),
        attempts: Number(row.attempts),
        stagedAt: Number(row.staged_at),
      }))
      .sort((a, b) => a.stagedAt - b.stagedAt);
  }

  /** Lock the due rows, mark them, read them: one transaction (MySQL family). */
  private claimInSteps(sql: OutboxStatements, request: OutboxClaimRequest): Promise<Record<string, unknown>[]> {
    const steps = sql.claimSteps!;
    return this.db.transaction(undefined, async (tx) => {
      const ids = (await tx.run(steps.lockDue(request.limit))).rows.map((row) => String(row.id));
      if (ids.length === 0) return [];
      await tx.run(steps.mark(request.owner, ids, request.claimTtl));
      return (await tx.run(steps.read(ids))).rows;
    });
  }

  async settle(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    const retryDelay = settlement.retryAt === undefined ? 0 : Math.max(0, Math.round(settlement.retryAt - Date.now()));
    const { affected } = await this.db.run(
      this.statements.settle(id, owner, settlement.next, retryDelay, settlement.error?.slice(0, 2_000)),
    );
    return affected > 0;
  }

  /** What waits; a missing outbox table is an `IdempotencyConfigurationError` (the relay is then left off). */
  async backlog(): Promise<OutboxBacklog> {
    let rows: Record<string, unknown>[];
    try {
      rows = (await this.db.run(this.statements.backlog())).rows;
    } catch (error) {
      if (!isMissingTableError(error)) throw error;
      throw new IdempotencyConfigurationError(
        `The outbox table ${this.table} of ${this.owner} does not exist.`,
        "Create it with the store's ensureTable() or the migration of every idempotency table (TypeORM: CreateIdempotencyTables1700000000000; Prisma: prismaIdempotencyMigrationSql(); Drizzle: the outbox of idempotencyPgTables() / idempotencyMysqlTables()), where handlers use IdempotencyOutbox.",
        { cause: error },
      );
    }
    const pending = Number(rows[0]?.pending ?? 0);
    const oldest = rows[0]?.oldest;
    return pending > 0 && oldest !== null && oldest !== undefined ? { pending, oldestStagedAt: Number(oldest) } : { pending };
  }

  /** Deletes up to `limit` rows sent more than `retention` ms ago; how many it deleted. */
  async purgeSent(retention: number, limit: number): Promise<number> {
    return (await this.db.run(this.statements.purgeSent(retention, limit))).affected;
  }

  async ensureTable(): Promise<void> {
    if (!this.sql) return;
    await this.db.withConnection(async (connection) => {
      for (const statement of this.statements.createTable()) await connection.run(plain(statement));
    });
  }

  /** Boot check where the outbox is used: the table answers with its columns. */
  async verify(): Promise<void> {
    try {
      await this.db.withConnection((connection) => connection.run(this.statements.probe()));
    } catch (error) {
      throw new IdempotencyConfigurationError(
        `The outbox table ${this.table} of ${this.owner} cannot be read (${(error as Error)?.message ?? String(error)}).`,
        "Create it with the store's ensureTable() or the migration of every idempotency table (TypeORM: CreateIdempotencyTables1700000000000; Prisma: prismaIdempotencyMigrationSql(); Drizzle: the outbox of idempotencyPgTables() / idempotencyMysqlTables()).",
        { cause: error },
      );
    }
  }
}
