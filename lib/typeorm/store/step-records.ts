import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import type { StepRequest } from '../../core/store.js';
import { nameOf } from './dialects/records-table.js';
import type { SqlDialect } from './dialects/sql-dialect.js';
import { stepStatements, stepsTableOf, type StepStatements } from './dialects/steps-table.js';
import { withRunner, type SqlExecutor } from './sql-executor.js';

/**
 * The step records of a `TypeOrmIdempotencyStore` (dialects/steps-table.ts), on pooled
 * connections of their own: never the connection of a business transaction, so a step
 * recorded before a rollback stays recorded (its effect happened outside the transaction).
 */
export class SqlStepRecords {
  private readonly sql: StepStatements;

  constructor(
    private readonly dataSource: DataSource,
    private readonly dialect: SqlDialect,
    private readonly executor: () => SqlExecutor,
  ) {
    this.sql = stepStatements(dialect.name, dialect.table);
  }

  async load(key: string): Promise<Record<string, string>> {
    const { rows } = await this.executor().run(this.sql.load(key));
    const steps: Record<string, string> = {};
    for (const row of rows) steps[String(row.step)] = String(row.result);
    return steps;
  }

  async save(key: string, token: string, request: StepRequest): Promise<boolean> {
    const { affected } = await this.executor().run(this.sql.save(key, token, request.step, request.result, request.ttl));
    return affected > 0;
  }

  async delete(key: string): Promise<void> {
    await this.executor().run(this.sql.delete(key));
  }

  /** Deletes up to `limit` expired step rows; how many it deleted. */
  async purge(limit: number): Promise<number> {
    try {
      return (await this.executor().run(this.sql.purgeBatch(limit))).affected;
    } catch {
      // No steps table yet (verify() reports it at boot): the records were purged all the same.
      return 0;
    }
  }

  async ensureTable(): Promise<void> {
    await withRunner(this.dataSource, this.dialect.name, async (runner) => {
      for (const statement of this.sql.createTable()) await runner.query(statement);
    });
  }

  /** Boot check: the schema holds steps (a 0.4 / 0.5 table has no steps table until its migration runs). */
  async verify(): Promise<void> {
    try {
      await withRunner(this.dataSource, this.dialect.name, (runner) => runner.query(this.sql.probe().sql));
    } catch (error) {
      const table = nameOf(stepsTableOf(this.dialect.table));
      throw new IdempotencyConfigurationError(
        `The step records table ${table} of TypeOrmIdempotencyStore cannot be read (${(error as Error)?.message ?? String(error)}).`,
        `Create it: run the AddIdempotencySteps1720000000000 migration (docs/steps.md, "Upgrading a 0.4 or 0.5 table"), or call store.ensureTable().`,
        { cause: error },
      );
    }
  }
}
