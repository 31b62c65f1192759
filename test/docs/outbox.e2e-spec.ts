import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { RabbitProbe } from '../messages/support.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import {
  buildPageApps,
  cleanUpDocApps,
  requestJson,
  run,
  startApp,
  startHttpApp,
  stopApp,
  waitFor,
  type RunningApp,
} from './support/doc-app.js';

/**
 * docs/outbox.md as a user meets it (test/docs/support/doc-app.ts): its refunds API and
 * its ledger, built by `tsc` from the page's own files with getting-started's package.json
 * and tsconfig.json, started as the page says (`node dist/ledger.js`, `npm start`), on the
 * real PostgreSQL and RabbitMQ. The page's call.sh: a refund commits and the ledger applies
 * it once, its retry is replayed and sends nothing. Then the page's two stories, with
 * RabbitMQ made unreachable for the API by a fault proxy in front of it (the ledger reaches
 * it directly): refunds made meanwhile are applied once it is back; an API killed (SIGKILL)
 * before it could send has its refund applied by the restarted API.
 *
 * The app gets a PostgreSQL schema of its own (the page's table names never meet another
 * run's) and a queue of its own.
 */
const runId = `${process.pid}_${Date.now().toString(36)}`;
const schema = `docs_outbox_${runId}`;
const queue = `docs-outbox-ledger-${runId}`;
const PG_URL = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}/${process.env.PGDATABASE ?? 'test'}`;
const RABBIT = { host: '127.0.0.1', port: 5672 };

const count = (text: string, needle: string) => text.split(needle).length - 1;

interface OutboxRow {
  messages: string;
  sent: boolean;
  attempts: number;
}

describe('docs/outbox.md, built and run as a user would', () => {
  let dir: string;
  let pg: Client;
  let probe: RabbitProbe;
  let proxy: FaultProxy;
  let ledger: RunningApp;
  let env: Record<string, string>;

  /** The outbox rows whose messages carry `refundId`. */
  async function rowsOf(refundId: string): Promise<OutboxRow[]> {
    const { rows } = await pg.query<OutboxRow>(
      `SELECT messages::text AS messages, sent_at IS NOT NULL AS sent, attempts FROM ${schema}.idempotency_records_outbox WHERE messages::text LIKE $1`,
      [`%"${refundId}"%`],
    );
    return rows;
  }

  const applied = (refundId: string) => count(ledger.output(), `applied ${refundId} (`);

  async function refund(base: string, refundId: string, amount = 5) {
    return requestJson(base, 'POST', `/refunds/${refundId}`, { key: refundId, body: { amount } });
  }

  async function pending(base: string): Promise<number> {
    return ((await requestJson(base, 'GET', '/refunds/outbox')).body as { pending: number }).pending;
  }

  beforeAll(async () => {
    pg = new Client({ connectionString: PG_URL });
    await pg.connect();
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
    probe = await RabbitProbe.open();
    proxy = await startFaultProxy(RABBIT);
    dir = (await buildPageApps('outbox', ['default'])).get('default')!;
    // The page's refunds.sql, as `psql "$DATABASE_URL" -f refunds.sql` runs it.
    await pg.query(`SET search_path TO ${schema}; ${readFileSync(join(dir, 'refunds.sql'), 'utf8')}`);
    env = {
      DATABASE_URL: `${PG_URL}?options=-c%20search_path%3D${schema}`,
      AMQP_URL: `amqp://guest:guest@${RABBIT.host}:${proxy.port}`,
      LEDGER_QUEUE: queue,
    };
    // The ledger reaches RabbitMQ directly: only the API's path goes through the proxy.
    ledger = startApp(dir, { ...env, AMQP_URL: `amqp://guest:guest@${RABBIT.host}:${RABBIT.port}` }, 'dist/ledger.js');
    await waitFor(
      'the ledger to listen',
      () => {
        if (ledger.child.exitCode !== null) throw new Error(`the ledger exited (${ledger.child.exitCode}):\n${ledger.output()}`);
        return ledger.output().includes('Nest microservice successfully started');
      },
      30_000,
    );
  }, 300_000);

  afterAll(async () => {
    try {
      // SIGTERM ends the ledger (enableShutdownHooks()): a handle left open fails the suite here.
      if (ledger) await stopApp(ledger);
    } finally {
      cleanUpDocApps();
      await proxy?.stop();
      await probe?.deleteQueues(queue);
      await probe?.close();
      await pg?.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pg?.end();
    }
  });

  it("the page's call.sh: the refund commits and the ledger applies it once; its retry is replayed and sends nothing", async () => {
    const { base, app } = await startHttpApp(dir, env);
    try {
      const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
      const output = await run('bash', ['-c', script], dir);
      expect([...output.matchAll(/HTTP\/[\d.]+ (\d+)/gm)].map(([, status]) => status)).toEqual(['201', '201']);
      expect([...output.matchAll(/idempotent-replayed: (\S+)/gim)].map(([, value]) => value)).toEqual(['true']);
      const answers = [...output.matchAll(/^\{"refundId":"(rf_[0-9a-f]{8})","amount":30,"messageId":"(msg_[A-Za-z0-9_-]{43})"\}/gm)];
      expect(answers).toHaveLength(2);
      const [[, refundId, messageId], [, againId, againMessage]] = answers;
      expect([againId, againMessage]).toEqual([refundId, messageId]);

      await waitFor(`the ledger to apply ${refundId}`, () => applied(refundId) > 0, 15_000);
      // "curl -s localhost:3000/refunds/outbox answers {"pending":0}" (the relay marks it sent after the broker's confirm).
      await waitFor('the backlog to empty', async () => (await requestJson(base, 'GET', '/refunds/outbox')).body?.pending === 0, 10_000);
      expect((await requestJson(base, 'GET', '/refunds/outbox')).body).toEqual({ pending: 0 });
      // One execution staged one message, sent; the replay staged nothing (the only way out is this table).
      const rows = await rowsOf(refundId);
      expect(rows).toHaveLength(1);
      expect(rows[0].sent).toBe(true);
      expect(JSON.parse(rows[0].messages)).toHaveLength(1);
      expect((await pg.query(`SELECT amount FROM ${schema}.refunds WHERE id = $1`, [refundId])).rows).toEqual([{ amount: 30 }]);
      expect(applied(refundId)).toBe(1);
    } finally {
      await stopApp(app);
    }
  }, 60_000);

  it('RabbitMQ away: the refunds answer 201 and wait in the outbox; once it is back, each is applied once', async () => {
    const { base, app } = await startHttpApp(dir, env);
    try {
      const warm = `rf_w${randomUUID().slice(0, 6)}`;
      expect((await refund(base, warm)).status).toBe(201);
      await waitFor(`the ledger to apply ${warm}`, () => applied(warm) === 1, 15_000);

      await proxy.refuse();
      proxy.dropConnections();
      const ids = [1, 2, 3].map((n) => `rf_o${n}${randomUUID().slice(0, 5)}`);
      for (const id of ids) expect((await refund(base, id)).status).toBe(201);
      // "GET /refunds/outbox shows its message waiting", tried and failed at least once.
      await waitFor(
        'a failed attempt of every staged refund',
        async () => {
          for (const id of ids) {
            const rows = await rowsOf(id);
            if (!(rows.length === 1 && !rows[0].sent && rows[0].attempts >= 1)) return false;
          }
          return true;
        },
        20_000,
      );
      expect(await pending(base)).toBe(ids.length);
      for (const id of ids) expect(applied(id)).toBe(0);
      // "the API logs a warning that it could not send it"
      expect(app.output()).toMatch(/The outbox could not send msg_\S+ through LEDGER/);

      await proxy.heal();
      await waitFor('every refund applied once RabbitMQ is back', () => ids.every((id) => applied(id) >= 1), 30_000);
      await waitFor('the backlog to empty', async () => (await pending(base)) === 0, 10_000);
      for (const id of [warm, ...ids]) expect(applied(id)).toBe(1);
    } finally {
      await proxy.heal();
      await stopApp(app);
    }
  }, 90_000);

  it('an API killed before it could send: the restarted API sends the committed refund, applied once', async () => {
    const first = await startHttpApp(dir, env);
    const id = `rf_k${randomUUID().slice(0, 6)}`;
    let restarted: { base: string; app: RunningApp } | undefined;
    try {
      await proxy.refuse();
      proxy.dropConnections();
      const answer = await refund(first.base, id, 7);
      expect(answer.status).toBe(201);
      await waitFor('a failed attempt to send it', async () => ((await rowsOf(id))[0]?.attempts ?? 0) >= 1, 20_000);
      // kill -9: no shutdown hook runs, the relay ends nowhere.
      first.app.child.kill('SIGKILL');
      await first.app.exited;
      expect(await rowsOf(id)).toEqual([expect.objectContaining({ sent: false })]);
      expect(applied(id)).toBe(0);

      await proxy.heal();
      restarted = await startHttpApp(dir, env);
      const started = Date.now();
      // The dead instance's claim runs out after claimTtl (10 s on the page), then the restarted relay sends it.
      await waitFor(`the ledger to apply ${id}`, () => applied(id) >= 1, 30_000);
      process.stdout.write(`docs/outbox.md: the killed API's refund applied ${Date.now() - started} ms after the restart\n`);
      const replay = await refund(restarted.base, id, 7);
      expect(replay).toMatchObject({ status: 201, replayed: 'true', body: answer.body });
      await waitFor('the backlog to empty', async () => (await pending(restarted!.base)) === 0, 10_000);
      expect(await rowsOf(id)).toEqual([expect.objectContaining({ sent: true })]);
      expect(applied(id)).toBe(1);
    } finally {
      await proxy.heal();
      if (restarted) await stopApp(restarted.app);
    }
  }, 90_000);
});
