// The records table's name and DDL live with the dialects in lib/sql/dialects/; this path
// stays for lib/typeorm/index.ts, which exports parseTableName and TableName from here.
export { parseTableName, type TableName } from '../../../sql/dialects/records-table.js';
