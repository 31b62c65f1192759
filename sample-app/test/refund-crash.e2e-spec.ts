import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DataSource } from 'typeorm';
import { Redis } from 'ioredis';

// POST /refunds (sample-app/src/refunds/) in real processes: the first is SIGKILLed
// between two steps of a refund (after the payment provider refunded, before the ledger
// and the e-mail), the retry goes to a fresh process. Each external effect must happen
// once, and later duplicates get the final answer replayed. On the embedded defaults
// (memory HTTP records, SQLite file) and on Redis + PostgreSQL.
const root = resolve(__dirname, '..', '..');
const run = randomUUID().replace(/-/g, '').slice(0, 12);
const workDir = join(root, '.tmp', `refund-crash-${process.pid}-${run}`);
const POSTGRES_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

interface AppProcess {
  readonly child: ChildProcess;
  readonly base: string;
  /** Resolves once the app has printed a line matching `pattern` (listening from now on). */
  printed(pattern: RegExp): Promise<void>;
}

function startApp(env: Record<string, string>): Promise<AppProcess> {
  const child = spawn(process.execPath, ['-r', './test/support/ts-require.js', 'sample-app/src/main.ts'], {
    cwd: root,
    env: { ...process.env, PORT: '0', SAMPLE_APP_DEMO_HOOKS: '1', REDIS_URL: '', DATABASE_URL: '', AMQP_URL: '', BULLMQ_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const waiters: Array<{ pattern: RegExp; done: () => void }> = [];
  const onData = (chunk: Buffer) => {
    output += chunk;
    for (const waiter of [...waiters]) {
      if (waiter.pattern.test(output)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.done();
      }
    }
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const printed = (pattern: RegExp) =>
    new Promise<void>((done, fail) => {
      const timer = setTimeout(() => fail(new Error(`the sample app did not print ${pattern} within 60 s:\n${output}`)), 60_000);
      waiters.push({ pattern, done: () => (clearTimeout(timer), done()) });
      onData(Buffer.alloc(0));
    });
  return new Promise((started, failed) => {
    child.once('exit', (code, signal) => failed(new Error(`the sample app exited (${signal ?? code}) before listening:\n${output}`)));
    printed(/listening on (http:\/\/127\.0\.0\.1:\d+)/).then(() => {
      const base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)![1];
      started({ child, base, printed });
    }, failed);
  });
}

async function stop(app: AppProcess | undefined, signal: NodeJS.Signals): Promise<void> {
  if (!app || app.child.exitCode !== null || app.child.signalCode !== null) return;
  const exited = new Promise((done) => app.child.once('exit', done));
  app.child.kill(signal);
  await exited;
}

async function post(app: AppProcess, key: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${app.base}/refunds`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    retryAfter: response.headers.get('retry-after'),
    body: await response.json(),
  };
}

/** A retry as a well-behaved client sends it: again after each 409's Retry-After, up to a deadline. */
async function retry(app: AppProcess, key: string, body: unknown) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const answer = await post(app, key, body);
    if (answer.status !== 409 || Date.now() > deadline) return answer;
    await new Promise((done) => setTimeout(done, Number(answer.retryAfter ?? 1) * 1000));
  }
}

/** The part of GET /stats this test reads. */
interface Stats {
  balance: number;
  refunds: { count: number };
  external: { paymentProvider: { calls: number; refunds: string[] }; mailer: { calls: number; emails: string[] } };
  idempotencyEvents: Record<string, number | undefined>;
}

const stats = async (app: AppProcess) => (await (await fetch(`${app.base}/stats`)).json()) as Stats;
const count = (list: string[], reference: string) => list.filter((r) => r === reference).length;

const backends: Array<[string, Record<string, string>]> = [
  ['the embedded defaults (memory HTTP records, SQLite file)', {}],
  [
    'Redis + PostgreSQL',
    { REDIS_URL, REDIS_PREFIX: `sample-app-crash:${run}:`, DATABASE_URL: POSTGRES_URL, DATABASE_SCHEMA: `sample_app_crash_${run}` },
  ],
];

afterAll(() => rmSync(workDir, { recursive: true, force: true }));

describe.each(backends)('POST /refunds killed between two steps, on %s', (name, backend) => {
  const dir = join(workDir, name.startsWith('Redis') ? 'pg' : 'sqlite');
  const env = {
    ...backend,
    SERVICES_FILE: join(dir, 'services.json'),
    ...(backend.DATABASE_URL ? {} : { SQLITE_FILE: join(dir, 'app.sqlite') }),
  };
  let app: AppProcess | undefined;

  beforeAll(() => mkdirSync(dir, { recursive: true }));
  afterEach(() => stop(app, 'SIGKILL'));
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    if (backend.REDIS_URL) {
      const redis = new Redis(backend.REDIS_URL);
      const keys = await redis.keys(`${backend.REDIS_PREFIX}*`);
      if (keys.length) await redis.del(...keys);
      await redis.quit();
    }
    if (backend.DATABASE_SCHEMA) {
      const admin = new DataSource({ type: 'postgres', url: POSTGRES_URL });
      await admin.initialize();
      await admin.query(`DROP SCHEMA IF EXISTS "${backend.DATABASE_SCHEMA}" CASCADE`);
      await admin.destroy();
    }
  }, 60_000);

  it('refunds at the provider once, writes the ledger once, e-mails once; later duplicates get the answer replayed', async () => {
    const key = `refund_${randomUUID()}`;
    const body = { accountId: 'acct_1', amount: 1_234, email: 'ada@example.com' };
    app = await startApp(env);
    const before = await stats(app);

    // The first attempt stops at the gate once step 1 (the provider's refund) is recorded ...
    const gate = app.printed(new RegExp(`demo-gate: paused after step provider-refund of refund ${key}`));
    const doomed = post(app, key, body, { 'x-demo-pause-after-step': 'provider-refund' }).catch((error: unknown) => error);
    await gate;
    // ... and the process dies there, with no chance to clean up.
    await stop(app, 'SIGKILL');
    expect(await doomed).toHaveProperty('message', 'fetch failed'); // the connection died with the process

    app = await startApp(env);
    const between = await stats(app);
    expect(count(between.external.paymentProvider.refunds, key)).toBe(1);
    expect(between.external.mailer.emails).toEqual(before.external.mailer.emails);
    expect(between.refunds.count).toBe(before.refunds.count);

    // The client's retry, in the new process: it resumes after the recorded step.
    const resumed = await retry(app, key, body);
    expect(resumed.status).toBe(200);
    expect(resumed.body).toMatchObject({
      reference: key,
      amount: 1_234,
      providerRefundId: expect.stringMatching(/^re_/),
      emailId: expect.stringMatching(/^em_/),
    });
    const afterRetry = await stats(app);

    // Later duplicates, at once: the final answer, replayed.
    const duplicates = await Promise.all([0, 1, 2].map(() => retry(app!, key, body)));
    for (const duplicate of duplicates) {
      expect(duplicate.status).toBe(200);
      expect(duplicate.replayed).toBe(true);
      expect(duplicate.body).toEqual(resumed.body);
    }

    const after = await stats(app);
    expect(count(after.external.paymentProvider.refunds, key)).toBe(1);
    // The provider was called once: the retry took step 1's result from its record.
    expect(after.external.paymentProvider.calls - before.external.paymentProvider.calls).toBe(1);
    expect(count(after.external.mailer.emails, key)).toBe(1);
    expect(after.external.mailer.calls - before.external.mailer.calls).toBe(1);
    expect(after.refunds.count - before.refunds.count).toBe(1);
    expect(before.balance - after.balance).toBe(1_234);
    // How: the new process replayed step 1 from its record and ran only the other two.
    expect(afterRetry.idempotencyEvents.step_replayed).toBe(1);
    expect(afterRetry.idempotencyEvents.step_completed).toBe(2);
  }, 120_000);
});
