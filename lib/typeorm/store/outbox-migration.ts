import type { MigrationInterface, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { shown } from '../../core/options.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { outboxStatements } from '../../sql/outbox-table.js';
import { dialectOf } from '../dialect.js';
import { dataSourceOf } from '../internals.js';
import type { IdempotencyRecordsMigrationOptions } from './migration.js';
import { defaultSchemaOf } from './dialects/registry.js';

/**
 * @internal The outbox table's DDL (`create`) or its drop, for the records table `tableName` of
 * the runner's database; `'if-supported'` skips a database with no outbox (SQLite) instead of refusing it.
 */
export async function runOutboxDdl(
  runner: QueryRunner,
  tableName: string,
  what: 'createTable' | 'dropTable',
  where: 'required' | 'if-supported' = 'required',
): Promise<void> {
  const dataSource = dataSourceOf(runner);
  const dialect = dialectOf(dataSource);
  const statements = outboxStatements(dialect, parseTableName(tableName, defaultSchemaOf(dataSource)));
  if (!statements) {
    if (where === 'if-supported') return;
    throw new IdempotencyConfigurationError(
      `The outbox table has no DDL for ${dialect} yet.`,
      'Use PostgreSQL, MySQL or MariaDB for the outbox (IdempotencyOutbox), or leave this migration out.',
    );
  }
  for (const sql of statements[what]()) await runner.query(sql);
}

/**
 * Creates `idempotency_records_outbox`, the table of the messages `IdempotencyOutbox.emit()`
 * stages (PostgreSQL, MySQL, MariaDB): add it after the records migration when handlers use the outbox.
 * `down` drops it. See docs/outbox.md.
 *
 * @deprecated use `CreateIdempotencyTables1700000000000` (or, where it already ran,
 * `createIdempotencyTablesMigration({ timestamp })`), which creates every missing table. Keep
 * this one in `migrations` where it already ran.
 */
export class AddIdempotencyOutbox1730000000000 implements MigrationInterface {
  name = 'AddIdempotencyOutbox1730000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await runOutboxDdl(queryRunner, DEFAULT_RECORDS_TABLE, 'createTable');
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await runOutboxDdl(queryRunner, DEFAULT_RECORDS_TABLE, 'dropTable');
  }
}

/**
 * `AddIdempotencyOutbox1730000000000` for a records table with another name (the outbox
 * table is `<records table>_outbox`, in its schema).
 *
 * @example
 * migrations: [createIdempotencyOutboxMigration('billing.idempotency_records', { timestamp: 1770000000000 })]
 *
 * @deprecated use `createIdempotencyTablesMigration({ tableName, timestamp })`, which creates every missing table of that name.
 */
export function createIdempotencyOutboxMigration(
  tableName: string,
  options: IdempotencyRecordsMigrationOptions = {},
): new () => MigrationInterface {
  const timestamp = options.timestamp ?? 1730000000000;
  if (!Number.isSafeInteger(timestamp) || String(timestamp).length !== 13) {
    throw new IdempotencyConfigurationError(
      `createIdempotencyOutboxMigration: timestamp must be 13-digit epoch ms, got ${shown(timestamp)}.`,
      'Pass the epoch ms of the day you add the migration, e.g. { timestamp: 1770000000000 }: TypeORM orders migrations by it.',
    );
  }
  const { table } = parseTableName(tableName);
  const name = `AddIdempotencyOutbox_${table}${timestamp}`;
  return class implements MigrationInterface {
    name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await runOutboxDdl(queryRunner, tableName, 'createTable');
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await runOutboxDdl(queryRunner, tableName, 'dropTable');
    }
  };
}
