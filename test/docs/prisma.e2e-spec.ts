import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Client } from 'pg';
import { buildApp, buildPageApps, cleanUpDocApps, packagePath, requestJson, run, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/prisma.md as a user meets it: the page's refunds app written from its text,
 * `prisma generate` (offline: generate needs no schema engine, the CLI only insists on
 * one), built by `tsc` with getting-started's tsconfig.json against the built package
 * (on the repository's install, or on the page's own in a fresh folder: doc-app.ts),
 * started with `node dist/main.js`, and sent refunds and their retries on PostgreSQL.
 */
const PG = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}`;
const database = `docs_prisma_${process.pid}`;

describe('docs/prisma.md, built and run as a user would', () => {
  let admin: Client;
  let pg: Client;
  let dir: string;

  beforeAll(async () => {
    admin = new Client({ connectionString: `${PG}/${process.env.PGDATABASE ?? 'test'}` });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${database}`);
    await admin.query(`CREATE DATABASE ${database}`);
    pg = new Client({ connectionString: `${PG}/${database}` });
    await pg.connect();
    // The page's psql line.
    await pg.query(
      "CREATE TABLE accounts (id text PRIMARY KEY, balance integer NOT NULL, version integer NOT NULL DEFAULT 0); INSERT INTO accounts VALUES ('acc_1', 1000, 0)",
    );

    dir = (await buildPageApps('prisma', ['default'], { build: false })).get('default')!;
    // The page's `npx prisma generate && npm run build`.
    await run(process.execPath, [join(packagePath(dir, 'prisma'), 'build', 'index.js'), 'generate'], dir, {
      ...process.env,
      PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true',
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
      CHECKPOINT_DISABLE: '1',
    });
    await buildApp(dir);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await pg?.end();
    await admin?.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin?.end();
  });

  const balance = async () => (await pg.query("SELECT balance FROM accounts WHERE id = 'acc_1'")).rows[0].balance as number;

  it('a retried refund changes the balance once, concurrent duplicates too, a reused key with another body is refused, and the app exits on SIGTERM', async () => {
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: `${PG}/${database}` });
    const refund = (key: string, amount: number) => requestJson(base, 'POST', '/accounts/acc_1/refunds', { body: { amount }, key });

    // The page's three curl commands.
    const first = await refund('r-1', 30);
    expect(first).toMatchObject({ status: 201, replayed: null, body: { refunded: 30, balance: 970 } });
    const retry = await refund('r-1', 30);
    expect(retry).toMatchObject({ status: 201, replayed: 'true', body: { refunded: 30, balance: 970 } });
    expect(await balance()).toBe(970);
    const reused = await refund('r-1', 90);
    expect(reused.status).toBe(422);
    expect(await balance()).toBe(970);

    // Ten copies of one request at once: one refund, ten identical answers.
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 10 }, () => refund(key, 40)));
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(201));
    for (const answer of answers) expect(answer.body).toEqual({ refunded: 40, balance: 930 });
    expect(await balance()).toBe(930);

    // The tables ensureTable() created hold the records.
    expect(Number((await pg.query('SELECT COUNT(*) AS n FROM idempotency_records')).rows[0].n)).toBe(2);
    await stopApp(app);
  }, 120_000);
});
