import { stepStatements } from '../sql/dialects/steps-table.js';
import { mysqlRecordsTableDdl } from '../sql/dialects/mysql-statements.js';
import { DEFAULT_RECORDS_TABLE, parseTableName, quotedRecordsTableDdl } from '../sql/dialects/records-table.js';
import type { PrismaProvider } from './prisma-client.js';

/**
 * The SQL that creates the records table and its steps table (`<table>_steps`) on
 * `provider`, for a migration file of your own (`prisma/migrations/<name>/migration.sql`,
 * applied by `prisma migrate deploy`, or by any SQL runner). The same statements as
 * `PrismaIdempotencyStore.ensureTable()`; idempotent (`IF NOT EXISTS`).
 */
export function prismaIdempotencyMigrationSql(provider: PrismaProvider, tableName: string = DEFAULT_RECORDS_TABLE): string {
  const table = parseTableName(tableName);
  const dialect = provider === 'mysql' ? 'mysql' : 'postgres';
  const records = dialect === 'mysql' ? mysqlRecordsTableDdl(table) : quotedRecordsTableDdl(table);
  const steps = stepStatements(dialect, table).createTable();
  return [...records, ...steps].map((statement) => `${statement};\n`).join('\n');
}
