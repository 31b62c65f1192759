import type { INestApplication, INestMicroservice } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyOutbox, MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';
import { OutboxRelay } from '../../lib/core/outbox-relay.js';
import type { OutboxMessage } from '../../lib/core/outbox-store.js';
import {
  TypeOrmIdempotencyStore,
  createIdempotencyOutboxMigration,
  createIdempotencyRecordsMigration,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { RabbitProbe, uniqueName, waitFor } from '../messages/support.js';
import { mariadbConnection } from '../support/mariadb.js';
import { pgConnection } from '../support/postgres.js';
import { captureLogger } from '../support/capture-logger.js';
import { ConsumerLog, startRefundsConsumer } from './apps.js';
import { dropPgOutbox, openPgOutbox, startPgRefundsApi } from './pg-app.js';

/**
 * Issue 44 on PostgreSQL through TypeORM: with `transactional: true` (and
 * runIdempotentTransaction) the staged messages are rows of `<records>_outbox` written in
 * the transaction of the business writes and the record; the relay claims them with
 * FOR UPDATE SKIP LOCKED and a claim lease.
 */
const tableName = () => `outbox_pg_${process.pid}_${randomBytes(4).toString('hex')}`;

describe('the outbox on PostgreSQL (TypeORM)', () => {
  const table = tableName();
  const queue = uniqueName('outbox-pg');
  const log = new ConsumerLog();
  const logged: string[] = [];
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  let refunds: string;
  let api: INestApplication;
  let consumer: INestMicroservice;
  let probe: RabbitProbe;

  beforeAll(async () => {
    ({ dataSource, store, refunds } = await openPgOutbox(table));
    probe = await RabbitProbe.open();
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
    api = await startPgRefundsApi({ store, refunds, queue, logger: captureLogger(logged) });
  });

  afterAll(async () => {
    await api?.close();
    await consumer?.close();
    await probe?.deleteQueues(queue);
    await probe?.close();
    if (dataSource) await dropPgOutbox(dataSource, table);
    await dataSource?.destroy();
  });

  const refund = (key: string, id: string, body: Record<string, unknown> = {}) =>
    request(api.getHttpServer())
      .post(`/refunds/${id}`)
      .set('Idempotency-Key', key)
      .send({ amount: 10, ...body });
  const outboxRows = async (refundId: string) =>
    (await dataSource.query(`SELECT "next", "count", "sent_at", "messages" FROM "${table}_outbox" WHERE "messages" LIKE $1`, [
      `%"refundId":"${refundId}"%`,
    ])) as Array<{ next: number; count: number; sent_at: string | null; messages: string }>;
  const refundRows = async (refundId: string) => (await dataSource.query(`SELECT "id" FROM ${refunds} WHERE "id" = $1`, [refundId])).length;

  it('stages the message with the refund and the record, sends it after the commit, and marks it sent', async () => {
    const res = await refund('k-1', 'r-1').expect(201);
    expect(await refundRows('r-1')).toBe(1);
    await waitFor('r-1 applied', () => log.effects.count('r-1') === 1);
    expect(log.messageIds).toContain(res.body.messageIds[0]);
    await waitFor('r-1 marked sent', async () => (await outboxRows('r-1'))[0]?.sent_at != null);
    const [row] = await outboxRows('r-1');
    expect(row).toMatchObject({ next: 1, count: 1 });
    expect(JSON.parse(row!.messages)[0].id).toBe(res.body.messageIds[0]);
  });

  it('a handler that throws rolls back the refund and its message; a replay stages nothing', async () => {
    await refund('k-2', 'r-2', { fail: true }).expect(402);
    expect(await refundRows('r-2')).toBe(0);
    expect(await outboxRows('r-2')).toEqual([]);
    await refund('k-3', 'r-3').expect(201);
    const replay = await refund('k-3', 'r-3').expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(await outboxRows('r-3')).toHaveLength(1);
    await refund('k-4', 'r-4').expect(201);
    await waitFor('r-4 applied', () => log.effects.count('r-4') === 1);
    await waitFor('r-3 applied', () => log.effects.count('r-3') === 1);
    expect(log.deliveries.count('r-2')).toBe(0);
    expect(log.deliveries.count('r-3')).toBe(1);
  });

  it('without the outbox table, the request fails and its refund rolls back with it: one transaction', async () => {
    await dataSource.query(`DROP TABLE "${table}_outbox"`);
    try {
      const res = await refund('k-5', 'r-5').expect(500);
      expect(res.body.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
      expect(logged.join('\n')).toMatch(/outbox table .* does not exist/);
      expect(await refundRows('r-5')).toBe(0);
    } finally {
      await store.ensureTable();
    }
    // The retry, with the table back, commits all three.
    await refund('k-5', 'r-5').expect(201);
    await waitFor('r-5 applied', () => log.effects.count('r-5') === 1);
  });

  it('runIdempotentTransaction and a lease-based execution on the same store stage with their commit', async () => {
    const outbox = api.get(IdempotencyOutbox);
    const transfer = (id: string) =>
      runIdempotentTransaction(dataSource, { key: id, tableName: table }, async (manager) => {
        await manager.query(`INSERT INTO ${refunds} ("id", "amount") VALUES ($1, 3)`, [id]);
        return outbox.emit('EVENTS', 'refund.completed', { refundId: id, amount: 3 });
      });
    const id = await transfer('t-1');
    expect(await transfer('t-1')).toBe(id); // a replay: nothing staged again
    await expect(
      runIdempotentTransaction(dataSource, { key: 't-2', tableName: table }, async () => {
        outbox.emit('EVENTS', 'refund.completed', { refundId: 't-2', amount: 3 });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    const leased = makeIdempotent(async (refundId: string) => outbox.emit('EVENTS', 'refund.completed', { refundId, amount: 4 }), {
      store,
      key: (refundId) => refundId,
      scope: 'leased-refund',
    });
    await leased('l-1');
    await waitFor('t-1 and l-1 applied', () => log.effects.count('t-1') === 1 && log.effects.count('l-1') === 1);
    expect(await outboxRows('t-1')).toHaveLength(1);
    expect(await outboxRows('t-2')).toEqual([]);
    expect(log.deliveries.count('t-2')).toBe(0);
  });
});

describe('two relays on one PostgreSQL outbox', () => {
  const table = tableName();
  const sources: DataSource[] = [];
  const relays: OutboxRelay[] = [];

  afterAll(async () => {
    await Promise.all(relays.map((relay) => relay.stop()));
    if (sources[0]) await dropPgOutbox(sources[0], table);
    await Promise.all(sources.map((source) => source.destroy()));
  });

  it('never send one message at once, send each once, and keep each execution in order', async () => {
    const opened = await openPgOutbox(table);
    sources.push(opened.dataSource);
    const stores = [opened.store];
    const other = new DataSource({ ...pgConnection, extra: { max: 4 } });
    await other.initialize();
    sources.push(other);
    stores.push(new TypeOrmIdempotencyStore(other, { tableName: table }));

    const run = makeIdempotent(
      async (n: number) => {
        const { stageOutboxMessage } = await import('../../lib/core/outbox.js');
        stageOutboxMessage('EVENTS', 'e', { tag: `${n}:0` });
        stageOutboxMessage('EVENTS', 'e', { tag: `${n}:1` });
      },
      { store: opened.store, key: (n) => String(n), scope: 'two-relays' },
    );
    await Promise.all(Array.from({ length: 60 }, (_, n) => run(n)));

    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const sent: string[][] = [[], []];
    stores.forEach((relayStore, index) => {
      const relay = new OutboxRelay(
        relayStore,
        async (message: OutboxMessage) => {
          if (inFlight.has(message.id)) overlaps.push(message.id);
          inFlight.add(message.id);
          await new Promise((resolve) => setTimeout(resolve, 1));
          inFlight.delete(message.id);
          sent[index]!.push((message.data as { tag: string }).tag);
        },
        { batchSize: 5, pollInterval: 20 },
      );
      relays.push(relay);
      relay.start();
    });
    await waitFor('120 messages', () => sent[0]!.length + sent[1]!.length === 120, 20_000);
    expect(overlaps).toEqual([]);
    expect(new Set([...sent[0]!, ...sent[1]!]).size).toBe(120);
    expect(sent[0]!.length).toBeGreaterThan(0);
    expect(sent[1]!.length).toBeGreaterThan(0);
    for (const tags of sent) {
      for (let n = 0; n < 60; n++) {
        const second = tags.indexOf(`${n}:1`);
        if (second >= 0) expect(tags.indexOf(`${n}:0`)).toBeLessThan(second);
        if (second >= 0) expect(tags.indexOf(`${n}:0`)).toBeGreaterThanOrEqual(0);
      }
    }
    // The sender's callback resolved for the last message; its relay settles it right after.
    await waitFor('the backlog empty', async () => (await stores[0]!.outboxBacklog()).pending === 0);
    expect(await stores[0]!.outboxBacklog()).toEqual({ pending: 0 });
    const sentRows = async () => Number((await sources[0]!.query(`SELECT count(*) AS "n" FROM "${table}_outbox"`))[0].n);
    expect(await sentRows()).toBe(60);
    // A relay with a short retention purges what was sent before it.
    const purging = new OutboxRelay(stores[0]!, async () => undefined, { retention: 1, pollInterval: 20 });
    relays.push(purging);
    purging.start();
    await waitFor('the sent rows purged', async () => (await sentRows()) === 0);
  }, 30_000);
});

describe('a lease-based completion with messages (TypeORM store, PostgreSQL and MariaDB)', () => {
  it.each([
    ['PostgreSQL', pgConnection],
    ['MariaDB', { ...mariadbConnection, database: 'test' }],
  ] as const)('%s: stages only with its own completion, once', async (_name, connection) => {
    const table = tableName();
    const dataSource = new DataSource({ ...(connection as typeof pgConnection) });
    await dataSource.initialize();
    try {
      const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
      await store.ensureTable();
      const staged = { id: 'x'.repeat(43), messages: JSON.stringify([{ id: 'msg_1', client: 'EVENTS', pattern: 'e', data: 1 }]), count: 1 };
      await store.claim('k', { token: 't1', leaseTtl: 10_000 });
      expect(await store.complete('k', 'someone-else', { result: '{}', ttl: 10_000, outbox: staged })).toBe(false);
      expect(await store.outboxBacklog()).toEqual({ pending: 0 });
      expect(await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged })).toBe(true);
      await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged }); // a repeat whose reply was lost
      expect(await store.outboxBacklog()).toMatchObject({ pending: 1 });
      expect(await store.get('k')).toMatchObject({ status: 'completed' });
    } finally {
      const q = dataSource.options.type === 'postgres' ? '"' : '`';
      for (const name of [`${table}_outbox`, `${table}_steps`, table]) await dataSource.query(`DROP TABLE IF EXISTS ${q}${name}${q}`);
      await dataSource.destroy();
    }
  });
});

describe('the outbox migration (TypeORM, PostgreSQL)', () => {
  it('creates <records>_outbox, which the store then stages in, and drops it', async () => {
    const table = tableName();
    const dataSource = new DataSource({ ...pgConnection, extra: { max: 2 } });
    await dataSource.initialize();
    const runner = dataSource.createQueryRunner();
    try {
      const Records = createIdempotencyRecordsMigration(table);
      const Outbox = createIdempotencyOutboxMigration(table, { timestamp: 1770000000000 });
      await new Records().up(runner);
      await new Outbox().up(runner);
      const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
      const run = makeIdempotent(
        async () => (await import('../../lib/core/outbox.js')).stageOutboxMessage('EVENTS', 'e', { n: 1 }).message.id,
        {
          store,
          key: () => 'k',
          scope: 'migrated',
        },
      );
      await run();
      expect(await store.outboxBacklog()).toMatchObject({ pending: 1 });
      await new Outbox().down(runner);
      expect(await dataSource.query(`SELECT to_regclass($1) AS "t"`, [`${table}_outbox`])).toEqual([{ t: null }]);
      await new Records().down(runner);
    } finally {
      await runner.release();
      await dropPgOutbox(dataSource, table);
      await dataSource.destroy();
    }
  });
});

describe('an application on PostgreSQL that never created the outbox table', () => {
  it('boots with no relay (no failing query nor log line per poll); its first emit, once the table exists, starts one', async () => {
    const table = tableName();
    const queue = uniqueName('outbox-late');
    const log = new ConsumerLog();
    const logged: string[] = [];
    const { dataSource, store, refunds } = await openPgOutbox(table);
    await dataSource.query(`DROP TABLE "${table}_outbox"`);
    const consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
    const api = await startPgRefundsApi({ store, refunds, queue, logger: captureLogger(logged), outbox: { pollInterval: 20 } });
    try {
      // A relay started at boot fails its first claim at once (its poll is 20 ms), and says so:
      // nothing is said over 25 polls.
      const quietUntil = Date.now() + 500;
      while (Date.now() < quietUntil) {
        expect(logged.filter((line) => line.includes('could not reach its store'))).toEqual([]);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await store.ensureTable();
      await request(api.getHttpServer()).post('/refunds/late-1').set('Idempotency-Key', 'late-1').send({ amount: 1 }).expect(201);
      await waitFor('late-1 applied', () => log.effects.count('late-1') === 1);
    } finally {
      await api.close();
      await consumer.close();
      await dropPgOutbox(dataSource, table);
      await dataSource.destroy();
    }
  });
});
