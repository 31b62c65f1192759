import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { DrizzleIdempotencyStore, idempotencyMysqlTables, idempotencyPgTables, idempotencyRecordsPg } from '../../lib/drizzle/index.js';
import { createMysqlDrizzle, createPgDrizzle } from './support.js';

const run = promisify(execFile);
const kit = process.env.DRIZZLE_KIT_BIN ?? resolve(__dirname, '../../node_modules/drizzle-kit/bin.cjs');
const lib = resolve(__dirname, '../../lib/drizzle');

/*
 * One name per dialect for every table the store needs (issue 43): a schema that exports
 * what `idempotencyPgTables()` / `idempotencyMysqlTables()` hold gets, from drizzle-kit, the
 * records, steps and outbox tables exactly as `ensureTable()` makes them, and the store's
 * boot checks (the outbox's included) pass on them.
 */

/** `drizzle-kit generate` on a schema that exports every table of the one name, as docs/drizzle.md shows. */
async function generate(dialect: 'postgresql' | 'mysql'): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-drizzle-one-'));
  try {
    const fn = dialect === 'postgresql' ? 'idempotencyPgTables' : 'idempotencyMysqlTables';
    writeFileSync(
      join(dir, 'schema.ts'),
      `import { ${fn} } from ${JSON.stringify(join(lib, 'index'))};\n` +
        `export const { records: idempotencyRecords, steps: idempotencySteps, outbox: idempotencyOutbox } = ${fn}();\n`,
    );
    await run(process.execPath, [kit, 'generate', '--dialect', dialect, '--schema', join(dir, 'schema.ts'), '--out', join(dir, 'out')], {
      cwd: dir,
      timeout: 120_000,
    });
    const file = readdirSync(join(dir, 'out')).find((name) => name.endsWith('.sql'))!;
    return readFileSync(join(dir, 'out', file), 'utf8')
      .split('--> statement-breakpoint')
      .map((statement) => statement.trim())
      .filter(Boolean);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The store's boot check, the outbox's (its backlog), then a record with a step and a staged message a relay claims and settles. */
async function useEveryTable(store: DrizzleIdempotencyStore): Promise<void> {
  await store.verify();
  await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
  const key = 'k' + randomUUID().replace(/-/g, '');
  const id = randomUUID().replace(/-/g, '');
  await store.claim(key, { token: 't', leaseTtl: 10_000 });
  await expect(store.saveStep(key, 't', { step: 's1', result: 'one', ttl: 60_000 })).resolves.toBe(true);
  const outbox = { id, messages: JSON.stringify([{ client: 'BROKER', pattern: 'paid', data: 1 }]), count: 1 };
  await expect(store.complete(key, 't', { result: 'done', ttl: 60_000, outbox })).resolves.toBe(true);
  await expect(store.loadSteps(key)).resolves.toEqual({ s1: 'one' });
  const claimed = await store.claimOutbox({ owner: 'relay-1', limit: 10, claimTtl: 5_000 });
  expect(claimed).toEqual([expect.objectContaining({ id, messages: outbox.messages, next: 0 })]);
  await expect(store.settleOutbox(id, 'relay-1', { next: 1 })).resolves.toBe(true);
  await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
}

type Fixture = Awaited<ReturnType<typeof createPgDrizzle>>;
type MysqlFixture = Awaited<ReturnType<typeof createMysqlDrizzle>>;

/** Every column and index of the schema's tables, as PostgreSQL describes them (schema name left out). */
async function pgShape(fixture: Fixture): Promise<unknown> {
  const { rows: columns } = await fixture.pool.query(
    `SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, column_default
     FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, column_name`,
    [fixture.schema],
  );
  const { rows: indexes } = await fixture.pool.query(
    `SELECT tablename, indexname, replace(replace(indexdef, $1 || '.', ''), '"' || $1 || '".', '') AS indexdef
     FROM pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname`,
    [fixture.schema],
  );
  return { columns, indexes };
}

/**
 * The same on MySQL / MariaDB: columns with their types and defaults, the collations of the
 * columns compared as exact keys (the definitions name a collation only there); indexes with their columns.
 */
async function mysqlShape(fixture: MysqlFixture): Promise<unknown> {
  const [columns] = await fixture.pool.query(
    `SELECT TABLE_NAME AS t, COLUMN_NAME AS c, COLUMN_TYPE AS type, IS_NULLABLE AS nullable, COLUMN_DEFAULT AS dflt,
       CASE WHEN COLUMN_NAME IN ('key', 'step', 'id', 'claimed_by') THEN COLLATION_NAME END AS collation
     FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? ORDER BY t, c`,
    [fixture.database],
  );
  const [indexes] = await fixture.pool.query(
    `SELECT TABLE_NAME AS t, INDEX_NAME AS name, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) AS columns
     FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? GROUP BY t, name ORDER BY t, name`,
    [fixture.database],
  );
  return { columns, indexes };
}

describe('idempotencyPgTables() / idempotencyMysqlTables(): every table of the store under one name', () => {
  it('holds the records, steps and outbox tables, the same definitions on every call (the deprecated constants are its own)', () => {
    expect(Object.keys(idempotencyPgTables())).toEqual(['records', 'steps', 'outbox']);
    expect(Object.keys(idempotencyMysqlTables())).toEqual(['records', 'steps', 'outbox']);
    expect(idempotencyPgTables()).toBe(idempotencyPgTables());
    expect(idempotencyPgTables().records).toBe(idempotencyRecordsPg);
  });

  it('PostgreSQL: drizzle-kit makes every table exactly as ensureTable() does, and the boot checks pass on them', async () => {
    const statements = await generate('postgresql');
    const generated = await createPgDrizzle();
    const ensured = await createPgDrizzle();
    try {
      for (const statement of statements) await generated.pool.query(statement);
      await new DrizzleIdempotencyStore(ensured.db).ensureTable();
      expect(await pgShape(generated)).toEqual(await pgShape(ensured));
      await useEveryTable(new DrizzleIdempotencyStore(generated.db));
    } finally {
      await generated.destroy();
      await ensured.destroy();
    }
  }, 120_000);

  it('MariaDB: drizzle-kit makes every table as ensureTable() does (keys binary-collated), and the boot checks pass on them', async () => {
    const statements = await generate('mysql');
    const generated = await createMysqlDrizzle();
    const ensured = await createMysqlDrizzle();
    try {
      for (const statement of statements) await generated.pool.query(statement);
      await new DrizzleIdempotencyStore(ensured.db).ensureTable();
      expect(await mysqlShape(generated)).toEqual(await mysqlShape(ensured));
      await useEveryTable(new DrizzleIdempotencyStore(generated.db));
    } finally {
      await generated.destroy();
      await ensured.destroy();
    }
  }, 120_000);
});
