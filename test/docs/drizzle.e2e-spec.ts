import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { buildPageApps, cleanUpDocApps, packagePath, requestJson, run, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/drizzle.md as a user meets it: its shortest path (`owned`: createDrizzleIdempotencyStore
 * from DATABASE_URL, the tables created at boot, the pool ended on SIGTERM), and the page's refunds app written from its text, built
 * by `tsc` with getting-started's tsconfig.json against the built package, its migration
 * (the page's drizzle/0000_init.sql, what `drizzle-kit generate` writes for its schema)
 * applied as `drizzle-kit migrate` would, started with `node dist/main.js`, and sent the
 * page's requests, concurrent duplicates and SIGTERM on PostgreSQL.
 */
const DATABASE_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}/${process.env.PGDATABASE ?? 'test'}`;
const schema = `docs_drizzle_${process.pid}`;
const ownedSchema = `docs_drizzle_owned_${process.pid}`;

function statementsOf(migration: string): string[] {
  return migration
    .split('--> statement-breakpoint')
    .map((statement) => statement.trim())
    .filter(Boolean);
}

describe('docs/drizzle.md, built and run as a user would', () => {
  let pg: Client;
  let dir: string;
  let ownedDir: string;

  beforeAll(async () => {
    const apps = await buildPageApps('drizzle', ['default', 'owned']);
    dir = apps.get('default')!;
    ownedDir = apps.get('owned')!;
    pg = new Client({ connectionString: DATABASE_URL });
    await pg.connect();
    await pg.query(`DROP SCHEMA IF EXISTS ${ownedSchema} CASCADE; CREATE SCHEMA ${ownedSchema}`);
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}; SET search_path TO ${schema}`);
    // `npx drizzle-kit migrate`: the page's migration, statement by statement.
    for (const statement of statementsOf(readFileSync(join(dir, 'drizzle', '0000_init.sql'), 'utf8'))) await pg.query(statement);
    // The page's psql line.
    await pg.query(`INSERT INTO accounts (id, balance) VALUES ('acc_1', 1000)`);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await pg?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg?.query(`DROP SCHEMA IF EXISTS ${ownedSchema} CASCADE`);
    await pg?.end();
  });

  it('the shortest path (a store that owns its pool): creates its tables, replays a payment, and ends its pool on SIGTERM', async () => {
    const { base, app } = await startHttpApp(ownedDir, { DATABASE_URL: `${DATABASE_URL}?options=-c%20search_path%3D${ownedSchema}` });
    // ensureTable: true created the idempotency tables in the database it was given.
    const { rows: tables } = await pg.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [ownedSchema]);
    expect(tables.map((row: { table_name: string }) => row.table_name)).toContain('idempotency_records');
    const script = readFileSync(join(ownedDir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
    const output = await run('bash', ['-c', script], ownedDir);
    expect([...output.matchAll(/HTTP\/[\d.]+ (\d+)/g)].map(([, status]) => status)).toEqual(['201', '201']);
    expect([...output.matchAll(/idempotent-replayed: (\S+)/gi)].map(([, value]) => value)).toEqual(['true']);
    const ids = [...output.matchAll(/"id":"(pay_[^"]+)","amount":30/g)].map(([, id]) => id);
    expect(ids).toHaveLength(2);
    expect(ids[1]).toBe(ids[0]);
    // The store ends its pool on SIGTERM (enableShutdownHooks): the process exits by itself.
    await stopApp(app);
  });

  it("shows the migration drizzle-kit generates for its schema, under the file name the page's `--name init` gives it", async () => {
    await run(
      process.execPath,
      [
        join(packagePath(dir, 'drizzle-kit'), 'bin.cjs'),
        'generate',
        '--dialect',
        'postgresql',
        '--schema',
        './src/schema.ts',
        '--out',
        './generated',
        '--name',
        'init',
      ],
      dir,
    );
    const [file, ...others] = readdirSync(join(dir, 'generated')).filter((name) => name.endsWith('.sql'));
    expect([file, ...others]).toEqual(['0000_init.sql']);
    expect(readFileSync(join(dir, 'generated', file), 'utf8').trim()).toBe(
      readFileSync(join(dir, 'drizzle', '0000_init.sql'), 'utf8').trim(),
    );
  }, 120_000);

  it('a retried refund changes the balance once, concurrent duplicates too, a mismatch is refused, and SIGTERM ends the app', async () => {
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: `${DATABASE_URL}?options=-c%20search_path%3D${schema}` });
    const refund = (key: string, amount: number) => requestJson(base, 'POST', '/refunds', { key, body: { accountId: 'acc_1', amount } });

    // The page's three curl commands and their comments.
    const first = await refund('rf-7', 30);
    expect(first).toMatchObject({ status: 201, replayed: null, body: { refunded: 30, balance: 970 } });
    const retry = await refund('rf-7', 30);
    expect(retry).toMatchObject({ status: 201, replayed: 'true', body: { refunded: 30, balance: 970 } });
    const other = await refund('rf-7', 45);
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');

    // Concurrent duplicates wait for the first transaction, then get its answer.
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 6 }, () => refund(key, 10)));
    for (const answer of answers) expect(answer).toMatchObject({ status: 201, body: { refunded: 10, balance: 960 } });
    expect(answers.filter((answer) => answer.replayed === 'true')).toHaveLength(5);

    const { rows } = await pg.query(`SELECT balance FROM accounts WHERE id = 'acc_1'`);
    expect(rows[0].balance).toBe(960);
    const { rows: refunds } = await pg.query(`SELECT count(*)::int AS n FROM refunds`);
    expect(refunds[0].n).toBe(2);
    await stopApp(app);
  }, 60_000);
});
