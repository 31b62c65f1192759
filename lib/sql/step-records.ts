import { IdempotencyConfigurationError } from '../core/errors.js';
import type { StepRequest } from '../core/store.js';
import type { SqlDialect } from './dialect.js';
import { nameOf } from './dialects/records-table.js';
import { stepStatements, stepsTableOf, type StepStatements } from './dialects/steps-table.js';
import type { SqlDatabase } from './port.js';
import { plain } from './statement.js';

/**
 * The step records of a SQL store (dialects/steps-table.ts), on pooled connections of
 * their own: never the connection of a business transaction, so a step recorded before a
 * rollback stays recorded (its effect happened outside the transaction).
 */
export class SqlStepRecords {
  private readonly sql: StepStatements;

  constructor(
    private readonly db: SqlDatabase,
    dialect: SqlDialect,
    /** The store's class name and how its users create the steps table (in verify()'s error). */
    private readonly owner: string,
    private readonly createHint: string,
  ) {
    this.sql = stepStatements(dialect.name, dialect.table);
    this.table = nameOf(stepsTableOf(dialect.table));
  }

  private readonly table: string;

  async load(key: string): Promise<Record<string, string>> {
    const { rows } = await this.db.run(this.sql.load(key));
    const steps: Record<string, string> = {};
    for (const row of rows) steps[String(row.step)] = String(row.result);
    return steps;
  }

  async save(key: string, token: string, request: StepRequest): Promise<boolean> {
    const { affected } = await this.db.run(this.sql.save(key, token, request.step, request.result, request.ttl));
    return affected > 0;
  }

  async delete(key: string): Promise<void> {
    await this.db.run(this.sql.delete(key));
  }

  /** Deletes up to `limit` expired step rows; how many it deleted. */
  async purge(limit: number): Promise<number> {
    try {
      return (await this.db.run(this.sql.purgeBatch(limit))).affected;
    } catch {
      // No steps table yet (verify() reports it at boot): the records were purged all the same.
      return 0;
    }
  }

  async ensureTable(): Promise<void> {
    await this.db.withConnection(async (connection) => {
      for (const statement of this.sql.createTable()) await connection.run(plain(statement));
    });
  }

  /** Boot check: the schema holds steps (a 0.4 / 0.5 table has no steps table until its migration runs). */
  async verify(): Promise<void> {
    try {
      await this.db.withConnection((connection) => connection.run(this.sql.probe()));
    } catch (error) {
      throw new IdempotencyConfigurationError(
        `The step records table ${this.table} of ${this.owner} cannot be read (${(error as Error)?.message ?? String(error)}).`,
        this.createHint,
        { cause: error },
      );
    }
  }
}
