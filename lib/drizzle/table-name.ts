// The table name rules are the SQL record store's, shared with the TypeORM and Prisma stores.
export { DEFAULT_RECORDS_TABLE, parseTableName, type TableName } from '../sql/dialects/records-table.js';
