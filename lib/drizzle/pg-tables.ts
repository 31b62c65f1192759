import { bigint, index, pgSchema, pgTable, primaryKey, text, varchar } from 'drizzle-orm/pg-core';
import { DEFAULT_RECORDS_TABLE, parseTableName } from './table-name.js';

/*
 * The records table and the step records table as Drizzle definitions for PostgreSQL:
 * the same columns, types, constraint and index names as `ensureTable()` and the TypeORM
 * migration create, so drizzle-kit generates (or `push` finds) exactly that table and the
 * store's statements run on it. test/drizzle/tables.spec.ts compares them column by column
 * with the table `ensureTable()` creates.
 */

/** The records table and the steps table of one records table name. */
export function idempotencyPgTables(tableName: string = DEFAULT_RECORDS_TABLE) {
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
  return { records, steps: stepRecords };
}

const defaults = idempotencyPgTables();

/**
 * The default records table `idempotency_records` (PostgreSQL). Export it from your Drizzle
 * schema so drizzle-kit creates it with your own tables.
 */
export const idempotencyRecordsPg = defaults.records;

/** The step records table `idempotency_records_steps` beside it (docs/steps.md). */
export const idempotencyStepsPg = defaults.steps;
