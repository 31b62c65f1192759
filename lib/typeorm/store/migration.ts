import type { MigrationInterface, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { shown } from '../../core/options.js';
import { dataSourceOf } from '../internals.js';
import { dialectOf } from '../dialect.js';
import { defaultSchemaOf, dropRecordsTableDdl, recordsTableDdl } from './dialects/registry.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { stepStatements } from '../../sql/dialects/steps-table.js';

/** @internal The records table and its steps table (idempotent). */
export async function createRecordsTable(runner: QueryRunner, tableName: string): Promise<void> {
  const dataSource = dataSourceOf(runner);
  const dialect = dialectOf(dataSource); // refuses unsupported drivers with a clear message
  for (const sql of recordsTableDdl(parseTableName(tableName, defaultSchemaOf(dataSource)), dialect)) await runner.query(sql);
  await createStepsTable(runner, tableName);
}

/** The step records table beside a records table (`<table>_steps`, docs/steps.md). Idempotent. */
async function createStepsTable(runner: QueryRunner, tableName: string): Promise<void> {
  const dataSource = dataSourceOf(runner);
  for (const sql of stepStatements(dialectOf(dataSource), parseTableName(tableName, defaultSchemaOf(dataSource))).createTable()) {
    await runner.query(sql);
  }
}

async function dropStepsTable(runner: QueryRunner, tableName: string): Promise<void> {
  const dataSource = dataSourceOf(runner);
  for (const sql of stepStatements(dialectOf(dataSource), parseTableName(tableName, defaultSchemaOf(dataSource))).dropTable()) {
    await runner.query(sql);
  }
}

/** @internal Drops the steps table, then the records table. */
export async function dropRecordsTable(runner: QueryRunner, tableName: string): Promise<void> {
  const dataSource = dataSourceOf(runner);
  await dropStepsTable(runner, tableName);
  for (const sql of dropRecordsTableDdl(parseTableName(tableName, defaultSchemaOf(dataSource)), dialectOf(dataSource)))
    await runner.query(sql);
}

/**
 * Creates the default `idempotency_records` table (PostgreSQL, MySQL / MariaDB or SQLite). Add it to your
 * DataSource's `migrations`. Safe to run on a database that already has the table.
 *
 * @deprecated use `CreateIdempotencyTables1700000000000`, which also creates the outbox table
 * (and whatever table a later version needs). Keep this one in `migrations` where it already ran.
 */
export class CreateIdempotencyRecords1700000000000 implements MigrationInterface {
  name = 'CreateIdempotencyRecords1700000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await createRecordsTable(queryRunner, DEFAULT_RECORDS_TABLE);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await dropRecordsTable(queryRunner, DEFAULT_RECORDS_TABLE);
  }
}

/** Options of `createIdempotencyRecordsMigration` (deprecated; see `IdempotencyTablesMigrationOptions`). */
export interface IdempotencyRecordsMigrationOptions {
  /**
   * Timestamp TypeORM orders migrations by (13 digits, epoch ms).
   * @default 1700000000000
   */
  timestamp?: number;
}

/**
 * A migration class for a records table with another name (`'table'` or `'schema.table'`).
 *
 * @example
 * migrations: [createIdempotencyRecordsMigration('billing.idempotency_records', { timestamp: 1735000000000 })]
 *
 * @deprecated use `createIdempotencyTablesMigration({ tableName, timestamp })`, which creates every missing table of that name.
 */
export function createIdempotencyRecordsMigration(
  tableName: string,
  options: IdempotencyRecordsMigrationOptions = {},
): new () => MigrationInterface {
  const timestamp = options.timestamp ?? 1700000000000;
  if (!Number.isSafeInteger(timestamp) || String(timestamp).length !== 13) {
    throw new IdempotencyConfigurationError(
      `createIdempotencyRecordsMigration: timestamp must be 13-digit epoch ms, got ${shown(timestamp)}.`,
      'Pass the epoch ms of the day you add the migration, e.g. { timestamp: 1735000000000 }: TypeORM orders migrations by it.',
    );
  }
  const { table } = parseTableName(tableName);
  // TypeORM reads the order from the last 13 characters of the name.
  const name = `CreateIdempotencyRecords_${table}${timestamp}`;
  return class implements MigrationInterface {
    name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await createRecordsTable(queryRunner, tableName);
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await dropRecordsTable(queryRunner, tableName);
    }
  };
}

/**
 * Adds the step records table (`idempotency_records_steps`, docs/steps.md) beside a default
 * `idempotency_records` table created by 0.4 or 0.5: add it to your DataSource's
 * `migrations` when upgrading. Safe to run where the table exists (a fresh database gets it
 * from `CreateIdempotencyRecords1700000000000` already).
 *
 * @deprecated use `CreateIdempotencyTables1700000000000`, which creates every missing table
 * (records, steps, outbox). Keep this one in `migrations` where it already ran.
 */
export class AddIdempotencySteps1720000000000 implements MigrationInterface {
  name = 'AddIdempotencySteps1720000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await createStepsTable(queryRunner, DEFAULT_RECORDS_TABLE);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await dropStepsTable(queryRunner, DEFAULT_RECORDS_TABLE);
  }
}

/**
 * `AddIdempotencySteps1720000000000` for a records table with another name.
 *
 * @example
 * migrations: [createIdempotencyStepsMigration('billing.idempotency_records', { timestamp: 1760000000000 })]
 *
 * @deprecated use `createIdempotencyTablesMigration({ tableName, timestamp })`, which creates every missing table of that name.
 */
export function createIdempotencyStepsMigration(
  tableName: string,
  options: IdempotencyRecordsMigrationOptions = {},
): new () => MigrationInterface {
  const timestamp = options.timestamp ?? 1720000000000;
  if (!Number.isSafeInteger(timestamp) || String(timestamp).length !== 13) {
    throw new IdempotencyConfigurationError(
      `createIdempotencyStepsMigration: timestamp must be 13-digit epoch ms, got ${shown(timestamp)}.`,
      'Pass the epoch ms of the day you add the migration, e.g. { timestamp: 1760000000000 }: TypeORM orders migrations by it.',
    );
  }
  const { table } = parseTableName(tableName);
  const name = `AddIdempotencySteps_${table}${timestamp}`;
  return class implements MigrationInterface {
    name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await createStepsTable(queryRunner, tableName);
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await dropStepsTable(queryRunner, tableName);
    }
  };
}
