import {
  bigint,
  customType,
  index,
  int,
  longtext,
  mediumtext,
  mysqlSchema,
  mysqlTable,
  primaryKey,
  text,
  varchar,
} from 'drizzle-orm/mysql-core';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './table-name.js';

/*
 * Every table of the store (records, step records, outbox) as Drizzle definitions for MySQL 8
 * and MariaDB, matching what `ensureTable()` creates: the keys binary-collated (two keys that
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
const id64 = binaryVarchar(64);

/**
 * Every table the installed version of the store needs, for one records table name (`'table'`
 * or `'database.table'`): `{ records, steps, outbox }` (the step records of docs/steps.md and
 * the outbox of docs/outbox.md). A version that adds a table adds it here. drizzle-kit reads
 * the top-level exports of your schema, so export each one there:
 *
 * ```ts
 * export const { records: idempotencyRecords, steps: idempotencySteps, outbox: idempotencyOutbox } = idempotencyMysqlTables();
 * ```
 *
 * Calling it again with the same name returns the same definitions.
 */
export function idempotencyMysqlTables(tableName: string = DEFAULT_RECORDS_TABLE) {
  let tables = byName.get(tableName);
  if (!tables) byName.set(tableName, (tables = defineMysqlTables(tableName)));
  return tables;
}

function defineMysqlTables(tableName: string) {
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
  const outboxName = `${name.table}_outbox`;
  // MySQL has no partial index: one index on (sent_at, available_at) serves the due rows and the purge.
  const outbox = table(
    outboxName,
    {
      id: id64('id').notNull(),
      key: key255('key').notNull(),
      messages: longtext('messages').notNull(),
      count: int('count').notNull(),
      next: int('next').notNull().default(0),
      attempts: int('attempts').notNull().default(0),
      stagedAt: bigint('staged_at', { mode: 'number' }).notNull(),
      availableAt: bigint('available_at', { mode: 'number' }).notNull(),
      claimedBy: id64('claimed_by'),
      claimedUntil: bigint('claimed_until', { mode: 'number' }).notNull().default(0),
      sentAt: bigint('sent_at', { mode: 'number' }),
      lastError: text('last_error'),
    },
    (t) => [primaryKey({ columns: [t.id] }), index(`idx_${outboxName}_due`).on(t.sentAt, t.availableAt)],
  );
  return { records, steps: stepRecords, outbox };
}

const byName = new Map<string, ReturnType<typeof defineMysqlTables>>();
const defaults = idempotencyMysqlTables();

/**
 * The default records table `idempotency_records` (MySQL / MariaDB).
 * @deprecated use `idempotencyMysqlTables()`, which holds every table the store needs (records, steps, outbox).
 */
export const idempotencyRecordsMysql = defaults.records;

/**
 * The step records table `idempotency_records_steps` beside it (docs/steps.md).
 * @deprecated use `idempotencyMysqlTables()`, which holds every table the store needs (records, steps, outbox).
 */
export const idempotencyStepsMysql = defaults.steps;
