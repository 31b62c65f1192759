import { stepStatements } from '../sql/dialects/steps-table.js';
import { mysqlRecordsTableDdl } from '../sql/dialects/mysql-statements.js';
import { DEFAULT_RECORDS_TABLE, parseTableName, quotedRecordsTableDdl } from '../sql/dialects/records-table.js';
import { outboxStatements } from '../sql/outbox-table.js';
import type { PrismaProvider } from './prisma-client.js';

/**
 * The SQL that creates every table the installed version of the store needs on `provider`:
 * the records table, its steps table (`<table>_steps`, docs/steps.md) and its outbox
 * (`<table>_outbox`, docs/outbox.md), for a migration file of your own
 * (`prisma/migrations/<name>/migration.sql`, applied by `prisma migrate deploy`, or by any
 * SQL runner). The same statements as `PrismaIdempotencyStore.ensureTable()`; each one
 * `IF NOT EXISTS`, so after an upgrade that adds a table, a new migration file with this
 * SQL creates only what is missing.
 */
export function prismaIdempotencyMigrationSql(provider: PrismaProvider, tableName: string = DEFAULT_RECORDS_TABLE): string {
  const table = parseTableName(tableName);
  const dialect = provider === 'mysql' ? 'mysql' : 'postgres';
  const records = dialect === 'mysql' ? mysqlRecordsTableDdl(table) : quotedRecordsTableDdl(table);
  const steps = stepStatements(dialect, table).createTable();
  const outbox = outboxStatements(dialect, table)?.createTable() ?? [];
  return [...records, ...steps, ...outbox].map((statement) => `${statement};\n`).join('\n');
}
