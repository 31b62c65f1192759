import type { MigrationInterface, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { shown } from '../../core/options.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { createRecordsTable, dropRecordsTable } from './migration.js';
import { runOutboxDdl } from './outbox-migration.js';

/** Options of `createIdempotencyTablesMigration`. */
export interface IdempotencyTablesMigrationOptions {
  /**
   * The records table, `'table'` or `'schema.table'`: the same name as the store's
   * `tableName` (the others are `<table>_steps` and `<table>_outbox`, in its schema).
   * @default 'idempotency_records'
   */
  tableName?: string;
  /**
   * Timestamp TypeORM orders migrations by (13 digits, epoch ms). TypeORM runs a migration
   * once per name, and the name ends with it: after an upgrade that adds a table, add this
   * migration again with the day's timestamp and it creates what is missing.
   * @default 1700000000000
   */
  timestamp?: number;
}

/** Every table the installed version needs, each only if it is missing (records, steps, outbox where the database has one). */
async function createTables(runner: QueryRunner, tableName: string): Promise<void> {
  await createRecordsTable(runner, tableName);
  await runOutboxDdl(runner, tableName, 'createTable', 'if-supported');
}

async function dropTables(runner: QueryRunner, tableName: string): Promise<void> {
  await runOutboxDdl(runner, tableName, 'dropTable', 'if-supported');
  await dropRecordsTable(runner, tableName);
}

/**
 * Creates every table the installed version of the store needs that the database lacks:
 * `idempotency_records`, its step records (`_steps`) and its outbox (`_outbox`; PostgreSQL,
 * MySQL, MariaDB; SQLite has no outbox). Each statement is `CREATE ... IF NOT EXISTS`, so it
 * runs on an empty database, on tables made by an older version's migrations and on tables
 * made by `synchronize` alike. Add it to your DataSource's `migrations`. `down` drops the
 * three tables.
 *
 * After an upgrade whose release notes add a table, add
 * `createIdempotencyTablesMigration({ timestamp })` with the day's timestamp: TypeORM runs
 * a migration once per name, so this one does not run again.
 */
export class CreateIdempotencyTables1700000000000 implements MigrationInterface {
  name = 'CreateIdempotencyTables1700000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await createTables(queryRunner, DEFAULT_RECORDS_TABLE);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await dropTables(queryRunner, DEFAULT_RECORDS_TABLE);
  }
}

/**
 * `CreateIdempotencyTables1700000000000` for a records table with another name, or with
 * another timestamp (the one step an upgrade that adds a table asks of an application that
 * runs migrations: TypeORM runs each name once).
 *
 * @example
 * migrations: [createIdempotencyTablesMigration({ tableName: 'billing.idempotency_records', timestamp: 1735000000000 })]
 */
export function createIdempotencyTablesMigration(options: IdempotencyTablesMigrationOptions = {}): new () => MigrationInterface {
  const tableName = options.tableName ?? DEFAULT_RECORDS_TABLE;
  const timestamp = options.timestamp ?? 1700000000000;
  if (!Number.isSafeInteger(timestamp) || String(timestamp).length !== 13) {
    throw new IdempotencyConfigurationError(
      `createIdempotencyTablesMigration: timestamp must be 13-digit epoch ms, got ${shown(timestamp)}.`,
      'Pass the epoch ms of the day you add the migration, e.g. { timestamp: 1735000000000 }: TypeORM orders migrations by it.',
    );
  }
  const { table } = parseTableName(tableName);
  // TypeORM reads the order from the last 13 characters of the name.
  const name = tableName === DEFAULT_RECORDS_TABLE ? `CreateIdempotencyTables${timestamp}` : `CreateIdempotencyTables_${table}${timestamp}`;
  return class implements MigrationInterface {
    name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await createTables(queryRunner, tableName);
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await dropTables(queryRunner, tableName);
    }
  };
}
