import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createConnection, type Connection } from 'mysql2/promise';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import type * as Root from '../../lib/index.js';
import type * as TypeOrmEntry from '../../lib/typeorm/index.js';
import { mariadbConnection } from '../support/mariadb.js';
import { buildPageApps, cleanUpDocApps, installedPackage, requestJson, root, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/typeorm.md as a user meets it (test/docs/support/doc-app.ts): its shortest path
 * (`owned`: createTypeOrmIdempotencyStore from DATABASE_URL, the tables created at boot,
 * the DataSource destroyed on SIGTERM), its refunds
 * application on PostgreSQL through @nestjs/typeorm (`default`) and on MariaDB with a
 * DataSource of its own (`mariadb`), each built by `tsc` with getting-started's
 * tsconfig.json from the page's own files, started with `node dist/main.js`, and sent the
 * page's curl commands, concurrent duplicates and a reused key on the real servers. Then
 * the page's warning under "Creating the tables" (idempotencyEntities with
 * `synchronize` on MySQL / MariaDB), checked on the real MariaDB with the package the apps
 * are built against (so `DOCS_LIB_REF` chooses it for both).
 *
 * Each app gets a schema (PostgreSQL) or a database (MariaDB) of its own, so the page's
 * table names (`accounts`, `idempotency_records`) never meet another run's.
 */
const run = `${process.pid}_${Date.now().toString(36)}`;
const schema = `docs_typeorm_${run}`;
const ownedSchema = `docs_typeorm_owned_${run}`;
const mariaDatabase = `docs_typeorm_${run}`;
const syncDatabase = `docs_typeorm_sync_${run}`;
const PG_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}/${process.env.PGDATABASE ?? 'test'}`;
const { host, port, username, password } = mariadbConnection;
const mariaUrl = (database: string) =>
  `mysql://${encodeURIComponent(username)}${password ? `:${encodeURIComponent(password)}` : ''}@${host}:${port}/${database}`;

/** The page's statements, as a reader pastes them: one at a time. */
function statementsOf(sql: string): string[] {
  return sql
    .split(';')
    .map((statement) => statement.trim())
    .filter(Boolean);
}

/** The code of a fenced block of the page (indentation removed), by a line it contains. */
function pageBlock(contains: string): string {
  const page = readFileSync(join(root, 'docs', 'typeorm.md'), 'utf8');
  const blocks = [...page.matchAll(/^( *)```[^\n]*\n([\s\S]*?)^\1```$/gm)].map(([, indent, code]) =>
    code.replace(new RegExp(`^${indent}`, 'gm'), ''),
  );
  const block = blocks.find((code) => code.includes(contains));
  if (!block) throw new Error(`docs/typeorm.md has no block containing ${contains}`);
  return block;
}

/** Runs the page's call.sh against `base`; resolves to its standard output. */
function curlScript(dir: string, base: string): Promise<string> {
  const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd: dir, stdio: ['ignore', 'pipe', 'ignore'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.on('exit', (code) => (code === 0 ? resolve(output) : reject(new Error(`call.sh exited ${code}:\n${output}`))));
  });
}

async function refund(base: string, key: string, amount: number) {
  const { status, replayed, body } = await requestJson(base, 'POST', '/refunds', { key, body: { accountId: 'acct_1', amount } });
  return { status, replayed, body: body as Record<string, unknown> };
}

/**
 * What the page claims of its application, on a fresh `accounts` table (acct_1 at 1000):
 * its curl commands answer as their comments say, concurrent duplicates replay the first
 * answer, and the balance changed once per key.
 */
async function expectRefundsOnce(dir: string, base: string, balance: () => Promise<number>): Promise<void> {
  const output = await curlScript(dir, base);
  expect([...output.matchAll(/HTTP\/[\d.]+ (\d+)/g)].map(([, status]) => status)).toEqual(['201', '201', '422']);
  expect([...output.matchAll(/idempotent-replayed: (\S+)/gi)].map(([, value]) => value)).toEqual(['true']);
  expect([...output.matchAll(/\{"refunded":30,"balance":970\}/g)]).toHaveLength(2);
  expect(output).toContain('"code":"IDEMPOTENCY_FINGERPRINT_MISMATCH"');
  expect(await balance()).toBe(970);

  // Three concurrent duplicates: one runs, two wait on its row lock and replay its answer.
  const key = randomUUID();
  const answers = await Promise.all([0, 1, 2].map(() => refund(base, key, 20)));
  for (const answer of answers) expect(answer).toMatchObject({ status: 201, body: { refunded: 20, balance: 950 } });
  expect(answers.filter((answer) => answer.replayed === 'true')).toHaveLength(2);
  expect(await refund(base, key, 20)).toEqual({ status: 201, replayed: 'true', body: { refunded: 20, balance: 950 } });
  const reused = await refund(base, key, 25);
  expect(reused.status).toBe(422);
  expect(reused.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
  expect(await balance()).toBe(950);
}

describe('docs/typeorm.md, built and run as a user would', () => {
  const dirs = new Map<string, string>();
  let pg: Client;
  let maria: Connection;

  beforeAll(async () => {
    for (const [name, dir] of await buildPageApps('typeorm', ['owned', 'default', 'mariadb'])) dirs.set(name, dir);
    pg = new Client({ connectionString: PG_URL });
    await pg.connect();
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
    await pg.query(`CREATE SCHEMA ${ownedSchema}`);
    maria = await createConnection({ host, port, user: username, password });
    for (const database of [mariaDatabase, syncDatabase]) await maria.query(`CREATE DATABASE \`${database}\``);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await pg?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg?.query(`DROP SCHEMA IF EXISTS ${ownedSchema} CASCADE`);
    await pg?.end();
    for (const database of [mariaDatabase, syncDatabase]) await maria?.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await maria?.end();
  });

  it('the shortest path (a store that owns its DataSource): creates its tables, replays a payment, and ends its connections on SIGTERM', async () => {
    const dir = dirs.get('owned')!;
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: `${PG_URL}?options=-c%20search_path%3D${ownedSchema}` });
    // ensureTable: true created the idempotency tables in the database it was given.
    const { rows: tables } = await pg.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [ownedSchema]);
    expect(tables.map((row: { table_name: string }) => row.table_name)).toContain('idempotency_records');
    const output = await curlScript(dir, base);
    expect([...output.matchAll(/HTTP\/[\d.]+ (\d+)/g)].map(([, status]) => status)).toEqual(['201', '201']);
    expect([...output.matchAll(/idempotent-replayed: (\S+)/gi)].map(([, value]) => value)).toEqual(['true']);
    const ids = [...output.matchAll(/"id":"(pay_[^"]+)","amount":30/g)].map(([, id]) => id);
    expect(ids).toHaveLength(2);
    expect(ids[1]).toBe(ids[0]);
    // The store destroys its DataSource on SIGTERM (enableShutdownHooks): the process exits by itself.
    await stopApp(app);
  });

  it('the PostgreSQL application (@nestjs/typeorm): a retried refund changes the balance once, another amount under its key is refused', async () => {
    const dir = dirs.get('default')!;
    for (const statement of statementsOf(readFileSync(join(dir, 'accounts.sql'), 'utf8'))) {
      await pg.query(`SET search_path TO ${schema}; ${statement}`);
    }
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: `${PG_URL}?options=-c%20search_path%3D${schema}` });
    // migrationsRun created the records table beside the accounts.
    const { rows: tables } = await pg.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [schema]);
    expect(tables.map((row: { table_name: string }) => row.table_name)).toEqual(
      expect.arrayContaining(['accounts', 'idempotency_records']),
    );
    await expectRefundsOnce(dir, base, async () => {
      const { rows } = await pg.query(`SELECT balance FROM ${schema}.accounts WHERE id = 'acct_1'`);
      return rows[0].balance as number;
    });
    await stopApp(app);
  });

  it('the MariaDB application (its own DataSource, forRoot({ store })): the same controller, the same answers', async () => {
    const dir = dirs.get('mariadb')!;
    for (const statement of statementsOf(readFileSync(join(dir, 'accounts.sql'), 'utf8'))) {
      await maria.query(`USE \`${mariaDatabase}\``);
      await maria.query(statement);
    }
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: mariaUrl(mariaDatabase) });
    // runMigrations in main.ts created the records table, with a result column that holds the default 1 MiB.
    const [columns] = (await maria.query(
      "SELECT DATA_TYPE AS type FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'idempotency_records' AND COLUMN_NAME = 'result'",
      [mariaDatabase],
    )) as unknown as [Array<{ type: string }>];
    expect(columns).toEqual([{ type: 'mediumtext' }]);
    await expectRefundsOnce(dir, base, async () => {
      const [rows] = (await maria.query(`SELECT balance FROM \`${mariaDatabase}\`.accounts WHERE id = 'acct_1'`)) as unknown as [
        Array<{ balance: number }>,
      ];
      return rows[0].balance;
    });
    // onApplicationShutdown destroys the DataSource: the process exits on SIGTERM.
    await stopApp(app);
  });

  describe('the warning under Creating the tables (idempotencyEntities with synchronize, on MariaDB)', () => {
    let pkg: typeof Root;
    let IdempotencyRecordEntity: typeof TypeOrmEntry.IdempotencyRecordEntity;
    let TypeOrmIdempotencyStore: typeof TypeOrmEntry.TypeOrmIdempotencyStore;
    /** The steps table's entity, which the page registers beside the records one (once the package exports it). */
    let IdempotencyStepEntity: Function | undefined;
    /** What the page registers, once the package exports it: every table of the store. */
    let idempotencyEntities: readonly Function[] | undefined;
    let previous: DataSource | undefined;
    // The repository's build of the package (the spec's own TypeORM must see its entities), made once per lib/ by the first suite that needs it.
    beforeAll(async () => {
      const dist = join(await installedPackage(), 'node_modules', 'nestjs-idempotency', 'dist', 'cjs');
      pkg = require(join(dist, 'index.js')) as typeof Root;
      const typeorm = require(join(dist, 'typeorm', 'index.js')) as typeof TypeOrmEntry & {
        IdempotencyStepEntity?: Function;
        idempotencyEntities?: readonly Function[];
      };
      ({ IdempotencyRecordEntity, TypeOrmIdempotencyStore, IdempotencyStepEntity, idempotencyEntities } = typeorm);
    }, 300_000);
    const synced = async (): Promise<DataSource> => {
      await previous?.destroy();
      previous = new DataSource({
        ...mariadbConnection,
        database: syncDatabase,
        entities: idempotencyEntities
          ? [...idempotencyEntities]
          : [IdempotencyRecordEntity, ...(IdempotencyStepEntity ? [IdempotencyStepEntity] : [])],
        synchronize: true,
        poolSize: 2,
      });
      await previous.initialize();
      // Without the entity exported, the same steps table from ensureTable() (CREATE TABLE IF NOT
      // EXISTS: the records table synchronize made, or found, is left as it is).
      if (!IdempotencyStepEntity) await new TypeOrmIdempotencyStore(previous).ensureTable();
      return previous;
    };
    const columnsOf = async (dataSource: DataSource) =>
      Object.fromEntries(
        (
          (await dataSource.query(
            "SELECT COLUMN_NAME AS name, DATA_TYPE AS type, COLLATION_NAME AS collation FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'idempotency_records' AND COLUMN_NAME IN ('key', 'result')",
          )) as Array<{ name: string; type: string; collation: string }>
        ).map(({ name, type, collation }) => [name, `${type} ${collation}`]),
      );

    afterAll(async () => {
      await previous?.destroy();
    });

    it('a fresh synchronize makes the MEDIUMTEXT table', async () => {
      const dataSource = await synced();
      expect(await columnsOf(dataSource)).toEqual({ key: 'varchar utf8mb4_bin', result: 'mediumtext utf8mb4_bin' });
      await expect(new TypeOrmIdempotencyStore(dataSource).verify()).resolves.toBeUndefined();
      await dataSource.query('DROP TABLE idempotency_records');
    });

    it("over 0.4's table it drops the stored answers and keeps the loose key, so verify() refuses; the page's ALTER TABLE fixes it", async () => {
      // The table 0.4's entity synchronized to: TEXT, and the server's default collation everywhere.
      await maria.query(`USE \`${syncDatabase}\``);
      await maria.query(
        'CREATE TABLE idempotency_records (`key` varchar(255) NOT NULL, status varchar(16) NOT NULL, lease_token varchar(255) NULL, ' +
          'lease_expires_at bigint NULL, fingerprint varchar(255) NULL, result text NULL, expires_at bigint NOT NULL, created_at bigint NOT NULL, ' +
          'CONSTRAINT pk_idempotency_records PRIMARY KEY (`key`), INDEX idx_idempotency_records_expires_at (expires_at)) ENGINE=InnoDB COLLATE utf8mb4_general_ci',
      );
      let runs = 0;
      const refundOf = (store: TypeOrmEntry.TypeOrmIdempotencyStore) =>
        pkg.makeIdempotent(async (id: string) => ({ id, refund: ++runs }), { store, key: (id) => id, scope: 'docs-typeorm-sync' });
      const plain = new DataSource({ ...mariadbConnection, database: syncDatabase, poolSize: 2 });
      await plain.initialize();
      try {
        expect(await refundOf(new TypeOrmIdempotencyStore(plain))('r1')).toEqual({ id: 'r1', refund: 1 });
      } finally {
        await plain.destroy();
      }

      const dataSource = await synced();
      expect(await columnsOf(dataSource)).toEqual({ key: 'varchar utf8mb4_general_ci', result: 'mediumtext utf8mb4_bin' });
      const store = new TypeOrmIdempotencyStore(dataSource);
      // The answer is gone; the key does not run again (409 IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE over HTTP).
      await expect(refundOf(store)('r1')).rejects.toBeInstanceOf(pkg.IdempotencyNotReplayableError);
      expect(runs).toBe(1);
      await expect(store.verify()).rejects.toThrow(/key column .* has the collation utf8mb4_general_ci/);

      // The page's upgrade statement, then the next synchronize finds nothing to change.
      await dataSource.query(pageBlock('ALTER TABLE `idempotency_records`').trim());
      await expect(store.verify()).resolves.toBeUndefined();
      const again = await synced();
      expect((await again.driver.createSchemaBuilder().log()).upQueries).toEqual([]);
      expect(await columnsOf(again)).toEqual({ key: 'varchar utf8mb4_bin', result: 'mediumtext utf8mb4_bin' });
      await again.query('DROP TABLE idempotency_records');
    });

    it('a LONGTEXT result column (maxResponseBytes over 16 MiB) is turned back into MEDIUMTEXT, dropping the answers, and verify() then refuses', async () => {
      const dataSource = await synced();
      await dataSource.query('ALTER TABLE idempotency_records MODIFY `result` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL');
      let runs = 0;
      const refundOf = (store: TypeOrmEntry.TypeOrmIdempotencyStore) =>
        pkg.makeIdempotent(async (id: string) => ({ id, refund: ++runs }), { store, key: (id) => id, scope: 'docs-typeorm-long' });
      await refundOf(new TypeOrmIdempotencyStore(dataSource))('r2');
      expect((await columnsOf(dataSource)).result).toBe('longtext utf8mb4_bin');

      const next = await synced();
      expect((await columnsOf(next)).result).toBe('mediumtext utf8mb4_bin');
      await expect(refundOf(new TypeOrmIdempotencyStore(next))('r2')).rejects.toBeInstanceOf(pkg.IdempotencyNotReplayableError);
      expect(runs).toBe(1);
      const refused = new TypeOrmIdempotencyStore(next, { maxResponseBytes: 17 * 1024 * 1024 }).verify();
      await expect(refused).rejects.toBeInstanceOf(pkg.IdempotencyConfigurationError);
      await expect(refused).rejects.toThrow(/MEDIUMTEXT, which holds 16777215 bytes: less than maxResponseBytes/);
    });
  });
});
