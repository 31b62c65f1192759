import { randomUUID } from 'node:crypto';
import { IdempotencyConfigurationError } from '../core/errors.js';
import { outboxStaged, sealOutbox } from '../core/outbox.js';
import { runWithOutbox, type OutboxDraft, type OutboxHost } from '../core/step-context.js';
import type { SqlDialect } from './dialect.js';
import { isMissingTableError } from './failures.js';
import { outboxStatements } from './outbox-table.js';
import type { SqlConnection } from './port.js';

/**
 * The outbox of one attempt of an idempotent transaction: `IdempotencyOutbox.emit()` called
 * by the work stages here, and the messages are inserted in the same transaction as the
 * business writes and the record, so they commit (or roll back) with them. A retried
 * attempt (InnoDB deadlock) starts a new one: the rolled-back attempt's messages are gone.
 */
export class TransactionOutbox implements OutboxHost {
  readonly token = randomUUID();
  readonly store = undefined;
  outbox?: OutboxDraft;
  private settled = false;
  private staged = false;

  constructor(readonly key: string) {}

  get isSettled(): boolean {
    return this.settled;
  }

  /** Runs the work with this attempt as the execution `emit()` stages with; nothing is staged once it ended. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await runWithOutbox(this, work);
    } finally {
      this.settled = true;
    }
  }

  /** Inserts what the work staged, on the transaction's connection. */
  async stageOn(tx: SqlConnection, dialect: SqlDialect): Promise<void> {
    const staged = sealOutbox(this);
    if (!staged) return;
    const statements = outboxStatements(dialect.name, dialect.table);
    if (!statements) {
      throw new IdempotencyConfigurationError(
        `IdempotencyOutbox.emit() was called in an idempotent transaction on ${dialect.name}, which has no outbox yet.`,
        'Use PostgreSQL, MySQL or MariaDB for the outbox, or the memory store.',
      );
    }
    try {
      await tx.run(statements.insert(this.key, staged));
    } catch (error) {
      if (!isMissingTableError(error)) throw error;
      throw new IdempotencyConfigurationError(
        `The outbox table ${statements.quoted} does not exist, so the messages of this transaction cannot be staged.`,
        "Create it with the store's ensureTable() or the migration of every idempotency table (TypeORM: CreateIdempotencyTables1700000000000; Prisma: prismaIdempotencyMigrationSql(); Drizzle: the outbox of idempotencyPgTables() / idempotencyMysqlTables()).",
        { cause: error },
      );
    }
    this.staged = true;
  }

  /** The transaction committed: the relays of this process wake for what it staged. */
  committed(): void {
    if (this.staged) outboxStaged();
  }
}
