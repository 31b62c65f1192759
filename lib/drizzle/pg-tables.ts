import { sql } from 'drizzle-orm';
import { bigint, index, integer, pgSchema, pgTable, primaryKey, text, varchar } from 'drizzle-orm/pg-core';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './table-name.js';

/*
 * Every table of the store (records, step records, outbox) as Drizzle definitions for
 * PostgreSQL: the same columns, types, constraint and index names as `ensureTable()` and the
 * TypeORM migration create, so drizzle-kit generates (or `push` finds) exactly that table and the
 * store's statements run on it. test/drizzle/tables.spec.ts compares them column by column
 * with the table `ensureTable()` creates.
 */

/**
 * Every table the installed version of the store needs, for one records table name (`'table'`
 * or `'schema.table'`): `{ records, steps, outbox }` (the step records of docs/steps.md and the
 * outbox of docs/outbox.md). A version that adds a table adds it here. drizzle-kit reads the
 * top-level exports of your schema, so export each one there:
 *
 * ```ts
 * export const { records: idempotencyRecords, steps: idempotencySteps, outbox: idempotencyOutbox } = idempotencyPgTables();
 * ```
 *
 * Calling it again with the same name returns the same definitions.
 */
export function idempotencyPgTables(tableName: string = DEFAULT_RECORDS_TABLE) {
  let tables = byName.get(tableName);
  if (!tables) byName.set(tableName, (tables = definePgTables(tableName)));
  return tables;
}

function definePgTables(tableName: string) {
  const name = parseTableName(tableName);
  const steps = `${name.table}_steps`;
  // pgTable for the default schema (drizzle-kit then leaves the schema to search_path). A
  // schema's table builder takes the same arguments; only the schema in its type differs.
  const table = name.schema === undefined ? pgTable : (pgSchema(name.schema).table as unknown as typeof pgTable);
  const records = table(
    name.table,
    {
      key: varchar('key', { length: 255 }).notNull(),
      status: varchar('status', { length: 16 }).notNull(),
      leaseToken: varchar('lease_token', { length: 255 }),
      // Epoch ms: bigint in the table, a JavaScript number in Drizzle (exact up to 2^53).
      leaseExpiresAt: bigint('lease_expires_at', { mode: 'number' }),
      fingerprint: varchar('fingerprint', { length: 255 }),
      result: text('result'),
      expiresAt: bigint('expires_at', { mode: 'number' }).notNull(),
      createdAt: bigint('created_at', { mode: 'number' }).notNull(),
    },
    (t) => [primaryKey({ name: `pk_${name.table}`, columns: [t.key] }), index(`idx_${name.table}_expires_at`).on(t.expiresAt)],
  );
  const stepRecords = table(
    steps,
    {
      key: varchar('key', { length: 255 }).notNull(),
      step: varchar('step', { length: 64 }).notNull(),
      result: text('result').notNull(),
      expiresAt: bigint('expires_at', { mode: 'number' }).notNull(),
    },
    (t) => [primaryKey({ name: `pk_${steps}`, columns: [t.key, t.step] }), index(`idx_${steps}_expires_at`).on(t.expiresAt)],
  );
  const outboxName = `${name.table}_outbox`;
  const outbox = table(
    outboxName,
    {
      id: varchar('id', { length: 64 }).notNull(),
      key: varchar('key', { length: 255 }).notNull(),
      messages: text('messages').notNull(),
      count: integer('count').notNull(),
      next: integer('next').notNull().default(0),
      attempts: integer('attempts').notNull().default(0),
      stagedAt: bigint('staged_at', { mode: 'number' }).notNull(),
      availableAt: bigint('available_at', { mode: 'number' }).notNull(),
      claimedBy: varchar('claimed_by', { length: 64 }),
      claimedUntil: bigint('claimed_until', { mode: 'number' }).notNull().default(0),
      sentAt: bigint('sent_at', { mode: 'number' }),
      lastError: text('last_error'),
    },
    (t) => [
      primaryKey({ name: `pk_${outboxName}`, columns: [t.id] }),
      index(`idx_${outboxName}_due`).on(t.availableAt).where(sql.raw(`"sent_at" IS NULL`)),
      index(`idx_${outboxName}_sent_at`).on(t.sentAt).where(sql.raw(`"sent_at" IS NOT NULL`)),
    ],
  );
  return { records, steps: stepRecords, outbox };
}

const byName = new Map<string, ReturnType<typeof definePgTables>>();
const defaults = idempotencyPgTables();

/**
 * The default records table `idempotency_records` (PostgreSQL).
 * @deprecated use `idempotencyPgTables()`, which holds every table the store needs (records, steps, outbox).
 */
export const idempotencyRecordsPg = defaults.records;

/**
 * The step records table `idempotency_records_steps` beside it (docs/steps.md).
 * @deprecated use `idempotencyPgTables()`, which holds every table the store needs (records, steps, outbox).
 */
export const idempotencyStepsPg = defaults.steps;
