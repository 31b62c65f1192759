import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as amqp from 'amqplib';
import { Client } from 'pg';
import { RABBITMQ_URL, freePort, waitFor } from '../messages/support.js';

/**
 * The getting-started page, and the RabbitMQ quick start of docs/messages.md, as a user
 * meets them: every app they show as files (```ts file=src/main.ts app=redis) is written
 * to a folder of its own, compiled by `tsc` with the page's own tsconfig.json against
 * the built package (CommonJS, as `nest new` makes apps), started with `node
 * dist/main.js` like the page's `npm start`, and sent a request and its retry on the
 * real services. A page that drifts from the package fails here.
 */
const root = join(__dirname, '..', '..');
const work = join(root, '.tmp', `docs-apps-${process.pid}`);
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const schema = `docs_app_${process.pid}`;
const DATABASE_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}/${process.env.PGDATABASE ?? 'test'}`;

type AppFiles = Map<string, { code: string }>;

function run(command: string, args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} ${args.join(' ')} (in ${cwd}) exited ${code}:\n${output}`)),
    );
  });
}

/** The package as npm installs it for a CommonJS app: package.json and dist/cjs. */
async function installPackage(): Promise<void> {
  const target = join(work, 'node_modules', 'nestjs-idempotency');
  mkdirSync(join(target, 'dist', 'cjs'), { recursive: true });
  copyFileSync(join(root, 'package.json'), join(target, 'package.json'));
  const out = join(target, 'dist', 'cjs');
  await run(
    process.execPath,
    [
      tsc,
      '-p',
      'tsconfig.build.json',
      '--outDir',
      out,
      '--module',
      'CommonJS',
      '--moduleResolution',
      'Node10',
      '--ignoreDeprecations',
      '6.0',
    ],
    root,
  );
  writeFileSync(join(out, 'package.json'), JSON.stringify({ type: 'commonjs' }));
}

async function writeAndBuild(name: string, files: AppFiles): Promise<string> {
  const dir = join(work, name);
  for (const [path, { code }] of files) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), code);
  }
  await run(process.execPath, [tsc, '-p', 'tsconfig.json'], dir);
  return dir;
}

interface RunningApp {
  child: ChildProcess;
  output: () => string;
}

const running: ChildProcess[] = [];

/** `npm start` of the page: node dist/main.js. */
function start(dir: string, env: Record<string, string>): RunningApp {
  const child = spawn(process.execPath, ['dist/main.js'], { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  running.push(child);
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  return { child, output: () => output };
}

async function startHttp(dir: string, env: Record<string, string> = {}): Promise<string> {
  const port = await freePort();
  const app = start(dir, { ...env, PORT: String(port) });
  const base = `http://127.0.0.1:${port}`;
  await waitFor(
    `the app in ${dir} to answer`,
    async () => {
      if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
      return fetch(base).then(
        () => true,
        () => false,
      );
    },
    30_000,
  );
  return base;
}

async function post(base: string, path: string, body: unknown, key?: string) {
  const response = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    body: (await response.json()) as Record<string, unknown>,
  };
}

/** Step 3 of the page: a payment, its retry, the key reused with another body, no key. */
async function expectStepThree(base: string): Promise<void> {
  const key = randomUUID();
  const first = await post(base, '/payments', { amount: 500, currency: 'EUR' }, key);
  expect(first).toMatchObject({ status: 201, replayed: null, body: { amount: 500, currency: 'EUR' } });
  expect(first.body.id).toMatch(/^pay_/);
  const retry = await post(base, '/payments', { amount: 500, currency: 'EUR' }, key);
  expect(retry).toEqual({ status: 201, replayed: 'true', body: first.body });
  const reused = await post(base, '/payments', { amount: 900, currency: 'EUR' }, key);
  expect(reused.status).toBe(422);
  expect(reused.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
  const keyless = await post(base, '/payments', { amount: 500, currency: 'EUR' });
  expect(keyless.status).toBe(400);
  expect(keyless.body.code).toBe('IDEMPOTENCY_KEY_MISSING');
}

describe('docs/getting-started.md and the RabbitMQ quick start, built and run as a user would', () => {
  // The reader is shared with scripts/check-docs.mjs, an ES module; Jest's transform loads it.
  const { docAppsOf } = require('../../scripts/doc-apps.mjs') as { docAppsOf: (markdown: string) => Map<string, AppFiles> };
  const gettingStarted = docAppsOf(readFileSync(join(root, 'docs', 'getting-started.md'), 'utf8'));
  const messages = docAppsOf(readFileSync(join(root, 'docs', 'messages.md'), 'utf8'));
  const dirs = new Map<string, string>();
  let pg: Client;

  beforeAll(async () => {
    expect([...gettingStarted.keys()].sort()).toEqual(['default', 'postgres', 'redis']);
    expect([...messages.keys()]).toEqual(['rabbitmq']);
    const base = gettingStarted.get('default')!;
    // The rest of the RabbitMQ app is getting started's (package.json, tsconfig.json), as the page says.
    const rabbitmq: AppFiles = new Map([...[...base].filter(([path]) => path.endsWith('.json')), ...messages.get('rabbitmq')!]);
    rmSync(work, { recursive: true, force: true });
    await installPackage();
    const apps: [string, AppFiles][] = [
      ['memory', base],
      ['redis', gettingStarted.get('redis')!],
      ['postgres', gettingStarted.get('postgres')!],
      ['rabbitmq', rabbitmq],
    ];
    await Promise.all(apps.map(async ([name, files]) => dirs.set(name, await writeAndBuild(name, files))));
    pg = new Client({ connectionString: DATABASE_URL });
    await pg.connect();
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
  }, 300_000);

  afterAll(async () => {
    for (const child of running) if (child.exitCode === null) child.kill('SIGKILL');
    await pg?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg?.end();
    rmSync(work, { recursive: true, force: true });
  });

  it('the memory store app (steps 2 and 3)', async () => {
    await expectStepThree(await startHttp(dirs.get('memory')!));
  });

  it('the Redis app (step 4)', async () => {
    await expectStepThree(await startHttp(dirs.get('redis')!, { REDIS_URL }));
  });

  it('the PostgreSQL app with @nestjs/typeorm and the migration (step 4): a retried refund changes the balance once', async () => {
    const accountId = `acct_${process.pid}`;
    // "an accounts table of your own"
    await pg.query(`CREATE TABLE ${schema}.accounts (id text PRIMARY KEY, balance integer NOT NULL)`);
    await pg.query(`INSERT INTO ${schema}.accounts VALUES ($1, 1000)`, [accountId]);
    const base = await startHttp(dirs.get('postgres')!, { DATABASE_URL: `${DATABASE_URL}?options=-c%20search_path%3D${schema}` });
    // migrationsRun created the records table in the app's schema.
    const tables = await pg.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [schema]);
    expect(tables.rows.map((row: { table_name: string }) => row.table_name)).toEqual(
      expect.arrayContaining(['accounts', 'idempotency_records']),
    );
    await expectStepThree(base);
    const key = randomUUID();
    const refunds = await Promise.all([0, 1, 2, 3].map(() => post(base, '/refunds', { accountId, amount: 30 }, key)));
    // Concurrent duplicates wait on the first transaction's row lock, then replay its answer.
    for (const refund of refunds) expect(refund).toMatchObject({ status: 201, body: { refunded: 30 } });
    expect(refunds.filter((refund) => refund.replayed === 'true')).toHaveLength(3);
    const retry = await post(base, '/refunds', { accountId, amount: 30 }, key);
    expect(retry).toEqual({ status: 201, replayed: 'true', body: { refunded: 30 } });
    const { rows } = await pg.query(`SELECT balance FROM ${schema}.accounts WHERE id = $1`, [accountId]);
    expect(rows[0].balance).toBe(970);
  });

  it('the RabbitMQ quick start: a retried refund.quote gets the first answer', async () => {
    const queue = `docs-refunds-${process.pid}-${Date.now()}`;
    const app = start(dirs.get('rabbitmq')!, { AMQP_URL: RABBITMQ_URL, REFUNDS_QUEUE: queue });
    const connection = await amqp.connect(RABBITMQ_URL);
    try {
      const channel = await connection.createChannel();
      await waitFor(
        'the quick start to consume its queue',
        async () => {
          if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
          const probe = await connection.createChannel();
          probe.on('error', () => {});
          try {
            return (await probe.checkQueue(queue)).consumerCount > 0;
          } catch {
            return false;
          } finally {
            await probe.close().catch(() => {});
          }
        },
        30_000,
      );
      const { queue: replyTo } = await channel.assertQueue('', { exclusive: true });
      const replies = new Map<string, unknown>();
      await channel.consume(
        replyTo,
        (message) => {
          if (message) replies.set(message.properties.correlationId as string, JSON.parse(message.content.toString()));
        },
        { noAck: true },
      );
      const messageId = randomUUID();
      const ask = async () => {
        const correlationId = randomUUID();
        const request = { pattern: 'refund.quote', data: { refundId: 'r1', accountId: 'a1', amount: 12 }, id: correlationId };
        channel.sendToQueue(queue, Buffer.from(JSON.stringify(request)), { replyTo, correlationId, messageId });
        await waitFor('the reply', () => replies.has(correlationId), 15_000);
        return (replies.get(correlationId) as { response: { quoteId: string; amount: number } }).response;
      };
      const first = await ask();
      expect(first).toMatchObject({ refundId: 'r1', amount: 12 });
      expect(first.quoteId).toMatch(/^[0-9a-f-]{36}$/);
      await expect(ask()).resolves.toEqual(first);
      // Another message id is another request: a new quote.
      const other = await (async () => {
        const correlationId = randomUUID();
        channel.sendToQueue(
          queue,
          Buffer.from(
            JSON.stringify({ pattern: 'refund.quote', data: { refundId: 'r1', accountId: 'a1', amount: 12 }, id: correlationId }),
          ),
          {
            replyTo,
            correlationId,
            messageId: randomUUID(),
          },
        );
        await waitFor('the reply', () => replies.has(correlationId), 15_000);
        return (replies.get(correlationId) as { response: { quoteId: string } }).response;
      })();
      expect(other.quoteId).not.toBe(first.quoteId);
    } finally {
      app.child.kill('SIGKILL');
      const cleanup = await connection.createChannel();
      for (const name of [queue, `${queue}.dead`]) await cleanup.deleteQueue(name).catch(() => {});
      await cleanup.deleteExchange(`${queue}.dead-letter`).catch(() => {});
      await connection.close();
    }
  });
});
