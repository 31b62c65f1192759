import { bigint, customType, index, mediumtext, mysqlSchema, mysqlTable, primaryKey, varchar } from 'drizzle-orm/mysql-core';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './table-name.js';

/*
 * The records table and the step records table as Drizzle definitions for MySQL 8 and
 * MariaDB, matching what `ensureTable()` creates: the keys binary-collated (two keys that
 * differ only by case are two keys; `verify()` refuses a case-insensitive key column) and
 * the results MEDIUMTEXT (16 MB; TEXT's 64 KB is below the default maxResponseBytes of
 * 1 MB). Drizzle has no table-level collation, so the binary columns carry theirs.
 */

/** A utf8mb4 varchar compared byte by byte (`utf8mb4_bin`), as the store's keys need. */
const binaryVarchar = (length: number) =>
  customType<{ data: string; driverData: string }>({
    dataType: () => `varchar(${length}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`,
  });

const key255 = binaryVarchar(255);
const step64 = binaryVarchar(64);

/** The records table and the steps table of one records table name (`'table'` or `'database.table'`). */
export function idempotencyMysqlTables(tableName: string = DEFAULT_RECORDS_TABLE) {
  const name = parseTableName(tableName);
  const steps = `${name.table}_steps`;
  // A database's table builder takes the same arguments; only the schema in its type differs.
  const table = name.schema === undefined ? mysqlTable : (mysqlSchema(name.schema).table as unknown as typeof mysqlTable);
  const records = table(
    name.table,
    {
      key: key255('key').notNull(),
      status: varchar('status', { length: 16 }).notNull(),
      leaseToken: varchar('lease_token', { length: 255 }),
      // Epoch ms: bigint in the table, a JavaScript number in Drizzle (exact up to 2^53).
      leaseExpiresAt: bigint('lease_expires_at', { mode: 'number' }),
      fingerprint: varchar('fingerprint', { length: 255 }),
      result: mediumtext('result'),
      expiresAt: bigint('expires_at', { mode: 'number' }).notNull(),
      createdAt: bigint('created_at', { mode: 'number' }).notNull(),
    },
    // MySQL names every primary key PRIMARY whatever name is given.
    (t) => [primaryKey({ columns: [t.key] }), index(`idx_${name.table}_expires_at`).on(t.expiresAt)],
  );
  const stepRecords = table(
    steps,
    {
      key: key255('key').notNull(),
      step: step64('step').notNull(),
      result: mediumtext('result').notNull(),
      expiresAt: bigint('expires_at', { mode: 'number' }).notNull(),
    },
    (t) => [primaryKey({ columns: [t.key, t.step] }), index(`idx_${steps}_expires_at`).on(t.expiresAt)],
  );
  return { records, steps: stepRecords };
}

const defaults = idempotencyMysqlTables();

/**
 * The default records table `idempotency_records` (MySQL / MariaDB). Export it from your
 * Drizzle schema so drizzle-kit creates it with your own tables.
 */
export const idempotencyRecordsMysql = defaults.records;

/** The step records table `idempotency_records_steps` beside it (docs/steps.md). */
export const idempotencyStepsMysql = defaults.steps;
