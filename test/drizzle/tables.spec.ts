import { randomUUID } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { getTableConfig as mysqlTableConfig } from 'drizzle-orm/mysql-core';
import { getTableConfig as pgTableConfig } from 'drizzle-orm/pg-core';
import {
  DrizzleIdempotencyStore,
  idempotencyMysqlTables,
  idempotencyPgTables,
  idempotencyRecordsMysql,
  idempotencyRecordsPg,
  idempotencyStepsMysql,
  idempotencyStepsPg,
} from '../../lib/drizzle/index.js';
import { createMysqlDrizzle, createPgDrizzle } from './support.js';

/**
 * The Drizzle table definitions are the tables ensureTable() (and the TypeORM migration)
 * create: the same columns, types, nullability, primary key and index names. drizzle-kit
 * generates its DDL from exactly these properties, so a schema that exports them gets the
 * store's tables (and `drizzle-kit push` on a database made by ensureTable() finds no diff).
 */
describe('the Drizzle table definitions match the tables the store creates', () => {
  it('PostgreSQL: idempotency_records and idempotency_records_steps', async () => {
    const fixture = await createPgDrizzle();
    try {
      await new DrizzleIdempotencyStore(fixture.db).ensureTable();
      for (const table of [idempotencyRecordsPg, idempotencyStepsPg]) {
        const config = pgTableConfig(table);
        const { rows: columns } = await fixture.pool.query(
          `SELECT column_name, data_type, character_maximum_length, is_nullable FROM information_schema.columns
           WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
          [fixture.schema, config.name],
        );
        expect(columns.length).toBeGreaterThan(0);
        const defined = config.columns.map((column) => ({
          column_name: column.name,
          type: column.getSQLType(),
          is_nullable: column.notNull ? 'NO' : 'YES',
        }));
        const created = columns.map((column) => ({
          column_name: column.column_name,
          type:
            column.data_type === 'character varying'
              ? `varchar(${column.character_maximum_length})`
              : column.data_type === 'bigint'
                ? 'bigint'
                : column.data_type,
          is_nullable: column.is_nullable,
        }));
        expect(sortByName(defined)).toEqual(sortByName(created));
        const { rows: constraints } = await fixture.pool.query(
          `SELECT tc.constraint_name, array_agg(kcu.column_name::text ORDER BY kcu.ordinal_position) AS columns
           FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name)
           WHERE tc.table_schema = $1 AND tc.table_name = $2 AND tc.constraint_type = 'PRIMARY KEY' GROUP BY tc.constraint_name`,
          [fixture.schema, config.name],
        );
        expect(constraints).toEqual([
          { constraint_name: config.primaryKeys[0].getName(), columns: config.primaryKeys[0].columns.map((column) => column.name) },
        ]);
        const { rows: indexes } = await fixture.pool.query(
          `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`,
          [fixture.schema, config.name],
        );
        const expiry = config.indexes[0].config;
        expect(indexes.find((index) => index.indexname === expiry.name)?.indexdef).toMatch(/\(expires_at\)$/);
        expect(expiry.columns.map((column) => (column as { name: string }).name)).toEqual(['expires_at']);
      }
    } finally {
      await fixture.destroy();
    }
  });

  it('MariaDB: the same, with binary-collated keys and MEDIUMTEXT results', async () => {
    const fixture = await createMysqlDrizzle();
    try {
      await new DrizzleIdempotencyStore(fixture.db).ensureTable();
      for (const table of [idempotencyRecordsMysql, idempotencyStepsMysql]) {
        const config = mysqlTableConfig(table);
        const [columns] = (await fixture.pool.query(
          `SELECT COLUMN_NAME AS name, COLUMN_TYPE AS type, IS_NULLABLE AS nullable, COLLATION_NAME AS collation FROM information_schema.COLUMNS
           WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
          [fixture.database, config.name],
        )) as unknown as [Array<{ name: string; type: string; nullable: string; collation: string | null }>];
        expect(columns.length).toBeGreaterThan(0);
        const defined = config.columns.map((column) => {
          const [type, collation] = column.getSQLType().split(/ CHARACTER SET utf8mb4 COLLATE /);
          return { name: column.name, type, nullable: column.notNull ? 'NO' : 'YES', binary: collation === undefined ? null : collation };
        });
        const created = columns.map((column) => ({
          name: column.name,
          // MariaDB shows a display width drizzle-kit does not write (bigint(20)).
          type: column.type.replace(/^bigint\(\d+\)/, 'bigint'),
          nullable: column.nullable,
          // The definitions name a collation only where it matters (the keys): utf8mb4_bin.
          binary: column.collation === 'utf8mb4_bin' && ['key', 'step'].includes(column.name) ? column.collation : null,
        }));
        expect(sortByName(defined)).toEqual(sortByName(created));
        const [keys] = (await fixture.pool.query(
          `SELECT INDEX_NAME AS name, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS columns FROM information_schema.STATISTICS
           WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? GROUP BY INDEX_NAME ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME`,
          [fixture.database, config.name],
        )) as unknown as [Array<{ name: string; columns: string }>];
        expect(keys).toEqual([
          { name: 'PRIMARY', columns: config.primaryKeys[0].columns.map((column) => column.name).join(',') },
          { name: config.indexes[0].config.name, columns: 'expires_at' },
        ]);
      }
    } finally {
      await fixture.destroy();
    }
  });

  it('names the tables after tableName, schema included, and reads the store’s rows through them', async () => {
    const fixture = await createPgDrizzle();
    try {
      const tableName = `${fixture.schema}.billing_keys`;
      const { records, steps } = idempotencyPgTables(tableName);
      expect(pgTableConfig(records)).toMatchObject({ name: 'billing_keys', schema: fixture.schema });
      expect(pgTableConfig(steps)).toMatchObject({ name: 'billing_keys_steps', schema: fixture.schema });
      expect(pgTableConfig(records).primaryKeys[0].getName()).toBe('pk_billing_keys');
      const store = new DrizzleIdempotencyStore(fixture.db, { tableName });
      await store.ensureTable();
      await store.verify();
      const key = 'k' + randomUUID().replace(/-/g, '');
      const token = randomUUID();
      await store.claim(key, { token, leaseTtl: 10_000, fingerprint: 'fp' });
      await store.complete(key, token, { result: 'done', ttl: 60_000 });
      const [row] = await fixture.db.select().from(records).where(eq(records.key, key));
      expect(row).toMatchObject({ key, status: 'completed', result: 'done', fingerprint: 'fp', leaseToken: null });
      expect(typeof row.expiresAt).toBe('number');
      expect(idempotencyMysqlTables('shop.keys').records).toBeDefined();
      expect(mysqlTableConfig(idempotencyMysqlTables('shop.keys').steps)).toMatchObject({ name: 'keys_steps', schema: 'shop' });
    } finally {
      await fixture.destroy();
    }
  });
});

function sortByName<T extends object>(rows: T[]): T[] {
  const nameOf = (row: T) =>
    String((row as { name?: unknown; column_name?: unknown }).name ?? (row as { column_name?: unknown }).column_name);
  return [...rows].sort((a, b) => nameOf(a).localeCompare(nameOf(b)));
}
