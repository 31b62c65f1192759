import type { INestApplication, INestMicroservice } from '@nestjs/common';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import { MemoryIdempotencyStore } from '../../lib/index.js';
import type { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { RabbitProbe, uniqueName, waitFor } from '../messages/support.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { ConsumerLog, startRefundsConsumer } from './apps.js';
import { dropPgOutbox, openPgOutbox, startPgRefundsApi } from './pg-app.js';

/**
 * Issue 44, the crash and the outage, on PostgreSQL and a real RabbitMQ: an instance
 * SIGKILLed after its record (and its staged message) committed and while its relay was
 * sending: another instance sends the message once the dead one's claim ran out; a broker
 * unreachable for a while: nothing lost, every message applied once after it is back.
 */
const CHILD = join(__dirname, 'fixtures', 'pg-child.ts');
const TS_REQUIRE = require.resolve('../support/ts-require.js');
const CLAIM_TTL = 2_000;

const children = new Set<ChildProcessWithoutNullStreams>();
afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
});

/** Starts one API instance in its own process; resolves with its port and a wait for a line it prints. */
async function startChild(
  env: Record<string, string>,
): Promise<{ child: ChildProcessWithoutNullStreams; port: number; printed(prefix: string): Promise<void> }> {
  const child = spawn(process.execPath, ['-r', TS_REQUIRE, CHILD], { env: { ...process.env, ...env }, stdio: 'pipe' });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let out = '';
  let err = '';
  const waiters: Array<() => void> = [];
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    for (const wake of waiters.splice(0)) wake();
  });
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const printed = (prefix: string) =>
    new Promise<void>((resolve, reject) => {
      const deadline = Date.now() + 30_000;
      const check = (): void => {
        if (out.split('\n').some((line) => line.startsWith(prefix))) return resolve();
        if (child.exitCode !== null || Date.now() > deadline) return reject(new Error(`the child did not print ${prefix}: ${out} ${err}`));
        waiters.push(check);
        setTimeout(check, 200).unref();
      };
      check();
    });
  await printed('READY ');
  const port = Number(/READY (\d+)/.exec(out)![1]);
  return { child, port, printed };
}

async function kill(child: ChildProcessWithoutNullStreams): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

describe('the outbox across a SIGKILL after the commit (PostgreSQL, RabbitMQ)', () => {
  const table = `outbox_crash_${process.pid}_${randomBytes(4).toString('hex')}`;
  const queue = uniqueName('outbox-crash');
  const log = new ConsumerLog();
  let dataSource: DataSource;
  let consumer: INestMicroservice;
  let probe: RabbitProbe;

  beforeAll(async () => {
    ({ dataSource } = await openPgOutbox(table));
    probe = await RabbitProbe.open();
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
  });
  afterAll(async () => {
    await consumer?.close();
    await probe?.deleteQueues(queue);
    await probe?.close();
    if (dataSource) await dropPgOutbox(dataSource, table);
    await dataSource?.destroy();
  });

  it('another instance sends what the killed one committed, within seconds, once', async () => {
    const env = { OUTBOX_TABLE: table, OUTBOX_QUEUE: queue, OUTBOX_CLAIM_TTL: String(CLAIM_TTL) };
    const doomed = await startChild({ ...env, OUTBOX_STUCK: '1' });
    const res = await request(`http://127.0.0.1:${doomed.port}`)
      .post('/refunds/c-1')
      .set('Idempotency-Key', 'c-1')
      .send({ amount: 7 })
      .expect(201);
    // Its record and message committed, and its relay claimed the message and is sending it: kill it there.
    await doomed.printed('SENDING ');
    await kill(doomed.child);
    const killedAt = Date.now();
    expect(log.deliveries.count('c-1')).toBe(0);

    const survivor = await startChild(env);
    try {
      await waitFor('c-1 applied', () => log.effects.count('c-1') === 1, 20_000);
      const elapsed = Date.now() - killedAt;
      expect(elapsed).toBeLessThan(10_000);
      expect(log.messageIds).toEqual([res.body.messageIds[0]]);
      // Sent by the survivor: the replay of the request is answered by it, and nothing is sent again.
      const replay = await request(`http://127.0.0.1:${survivor.port}`)
        .post('/refunds/c-1')
        .set('Idempotency-Key', 'c-1')
        .send({ amount: 7 })
        .expect(201);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      await waitFor(
        'c-1 marked sent',
        async () => (await dataSource.query(`SELECT 1 FROM "${table}_outbox" WHERE "sent_at" IS NOT NULL`)).length === 1,
      );
      expect(log.deliveries.count('c-1')).toBe(1);
      process.stdout.write(`outbox crash: message applied ${elapsed} ms after the SIGKILL (claim ttl ${CLAIM_TTL} ms)\n`);
    } finally {
      await kill(survivor.child);
    }
  }, 60_000);
});

describe('the outbox while RabbitMQ is unreachable (fault proxy, PostgreSQL)', () => {
  const table = `outbox_outage_${process.pid}_${randomBytes(4).toString('hex')}`;
  const queue = uniqueName('outbox-outage');
  const log = new ConsumerLog();
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let api: INestApplication;
  let consumer: INestMicroservice;
  let probe: RabbitProbe;
  let proxy: FaultProxy;

  beforeAll(async () => {
    let refunds: string;
    ({ dataSource, store, refunds } = await openPgOutbox(table));
    probe = await RabbitProbe.open();
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
    proxy = await startFaultProxy({ host: '127.0.0.1', port: 5672 });
    api = await startPgRefundsApi({
      store,
      refunds,
      queue,
      rabbitUrl: `amqp://guest:guest@127.0.0.1:${proxy.port}`,
      outbox: { sendTimeout: 1_000, claimTtl: 2_000, retryDelay: 100, maxRetryDelay: 1_000 },
    });
  });
  afterAll(async () => {
    await api?.close();
    await proxy?.stop();
    await consumer?.close();
    await probe?.deleteQueues(queue);
    await probe?.close();
    if (dataSource) await dropPgOutbox(dataSource, table);
    await dataSource?.destroy();
  });

  const refund = (id: string) => request(api.getHttpServer()).post(`/refunds/${id}`).set('Idempotency-Key', id).send({ amount: 1 });

  it('loses nothing: every message staged during the outage is applied once after it', async () => {
    await refund('o-0').expect(201);
    await waitFor('o-0 applied', () => log.effects.count('o-0') === 1);

    await proxy.refuse();
    proxy.dropConnections();
    const ids = ['o-1', 'o-2', 'o-3', 'o-4', 'o-5'];
    for (const id of ids) await refund(id).expect(201);
    // The relay keeps trying, with back-off, while the broker is away.
    await waitFor(
      'failed attempts recorded',
      async () => (await dataSource.query(`SELECT max("attempts") AS "most" FROM "${table}_outbox" WHERE "sent_at" IS NULL`))[0].most >= 2,
      15_000,
    );
    expect((await store.outboxBacklog()).pending).toBe(ids.length);
    for (const id of ids) expect(log.deliveries.count(id)).toBe(0);

    const healedAt = Date.now();
    await proxy.heal();
    await waitFor('every refund applied', () => ids.every((id) => log.effects.count(id) === 1), 30_000);
    process.stdout.write(`outbox outage: ${ids.length} messages applied ${Date.now() - healedAt} ms after the broker came back\n`);
    await waitFor('the backlog empty', async () => (await store.outboxBacklog()).pending === 0);
    // Duplicates only with the same id: each refund's deliveries carried one message id.
    for (const id of ids) expect(log.effects.count(id)).toBe(1);
    expect(new Set(log.messageIds).size).toBe(ids.length + 1);
  }, 60_000);
});
