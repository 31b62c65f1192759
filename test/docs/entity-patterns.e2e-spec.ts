import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { buildPageApps, cleanUpDocApps, requestJson, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/entity-patterns.md as a user meets it (test/docs/support/doc-app.ts): its
 * application (VersionedEntity and IdempotentEntity, updateWithVersion, insertOrGet,
 * retryOnOptimisticLock) built by `tsc` with getting-started's tsconfig.json from the
 * page's own files, started with `node dist/main.js` on a PostgreSQL schema of its own,
 * and sent the page's curl commands, whose comments are the answers it must give: a
 * stale version is refused, a redelivered message id is de-duplicated. Then concurrent
 * deliveries and concurrent refunds of one account.
 */
const schema = `docs_entities_${process.pid}_${Date.now().toString(36)}`;
const PG_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}/${process.env.PGDATABASE ?? 'test'}`;

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

async function refund(base: string, messageId: string, amount: number) {
  const { status, body } = await requestJson(base, 'POST', '/refunds', { body: { messageId, accountId: 1, amount } });
  return { status, body: body as { id: number; created: boolean } };
}

describe('docs/entity-patterns.md, built and run as a user would', () => {
  let dir: string;
  let pg: Client;

  beforeAll(async () => {
    dir = (await buildPageApps('entity-patterns', ['default'])).get('default')!;
    pg = new Client({ connectionString: PG_URL });
    await pg.connect();
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await pg?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg?.end();
  });

  it('answers the curl commands as their comments say: a stale version is refused, a redelivered message moves the money once', async () => {
    const { base, app } = await startHttpApp(dir, { DATABASE_URL: `${PG_URL}?options=-c%20search_path%3D${schema}` });
    // Every command's answer, "<body> <status>", against the comment below it, "# <status> <body>".
    const script = readFileSync(join(dir, 'call.sh'), 'utf8');
    const expected = [...script.matchAll(/^# (\d{3}) (\{.*\})$/gm)].map(([, status, body]) => ({ status, body: JSON.parse(body) }));
    const answers = (await curlScript(dir, base))
      .trim()
      .split('\n')
      .map((line) => /^(.*) (\d{3})$/.exec(line)!)
      .map(([, body, status]) => ({ status, body: JSON.parse(body) }));
    expect(expected).toHaveLength(6);
    expect(answers).toEqual(expected);

    // The unique index is the one that refused the second row: one row per message id.
    const { rows: records } = await pg.query(`SELECT idem_key, amount FROM ${schema}.refund_records`);
    expect(records).toEqual([{ idem_key: 'msg_1', amount: 30 }]);

    // Four concurrent deliveries of one message: one inserts, three wait for it and get its row.
    const deliveries = await Promise.all([0, 1, 2, 3].map(() => refund(base, 'msg_2', 20)));
    for (const delivery of deliveries)
      expect(delivery).toEqual({ status: 201, body: { id: deliveries[0].body.id, created: expect.any(Boolean) } });
    expect(deliveries.filter((delivery) => delivery.body.created)).toHaveLength(1);

    // Three different refunds of the account at once: where their versioned writes conflict,
    // retryOnOptimisticLock runs each transaction again until all three are applied.
    const distinct = await Promise.all(['msg_3', 'msg_4', 'msg_5'].map((id) => refund(base, id, 10)));
    for (const answer of distinct) expect(answer).toMatchObject({ status: 201, body: { created: true } });

    const account = await requestJson(base, 'GET', '/accounts/1');
    expect(account.body).toMatchObject({ id: 1, balance: 870 - 20 - 30 });
    const { rows } = await pg.query(`SELECT count(*)::int AS refunds, sum(amount)::int AS total FROM ${schema}.refund_records`);
    expect(rows[0]).toEqual({ refunds: 5, total: 30 + 20 + 30 });
    await stopApp(app);
  });
});
