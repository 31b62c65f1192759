import { randomBytes } from 'node:crypto';
import { DataSource } from 'typeorm';
import { makeIdempotent } from '../../lib/index.js';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { OutboxRelay } from '../../lib/core/outbox-relay.js';
import type { OutboxMessage } from '../../lib/core/outbox-store.js';
import { TypeOrmIdempotencyStore, runIdempotentTransaction } from '../../lib/typeorm/index.js';
import { waitFor } from '../messages/support.js';
import { mariadbConnection } from '../support/mariadb.js';

/**
 * Issue 44 on MariaDB through TypeORM: the outbox rows are written in the idempotent
 * transaction (or with a lease-based completion), claimed in a transaction of their own
 * (SELECT ... FOR UPDATE SKIP LOCKED, then the claim lease), settled, purged.
 */
describe('the outbox on MariaDB (TypeORM)', () => {
  const table = `outbox_maria_${process.pid}_${randomBytes(4).toString('hex')}`;
  const sources: DataSource[] = [];
  const stores: TypeOrmIdempotencyStore[] = [];
  const relays: OutboxRelay[] = [];

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const source = new DataSource({ ...mariadbConnection, database: 'test', extra: { connectionLimit: 4 } });
      await source.initialize();
      sources.push(source);
      stores.push(new TypeOrmIdempotencyStore(source, { tableName: table }));
    }
    await stores[0]!.ensureTable();
    await sources[0]!.query(`CREATE TABLE IF NOT EXISTS \`${table}_refunds\` (\`id\` varchar(64) PRIMARY KEY)`);
  });
  afterAll(async () => {
    await Promise.all(relays.map((relay) => relay.stop()));
    for (const name of [`${table}_refunds`, `${table}_outbox`, `${table}_steps`, table])
      await sources[0]?.query(`DROP TABLE IF EXISTS \`${name}\``);
    await Promise.all(sources.map((source) => source.destroy()));
  });

  const emit = (tag: string) => stageOutboxMessage('EVENTS', 'e', { tag }).message.id;

  it('stages with the commit (not with a rollback); two relays send each message once, never at once, in order; sent rows are purged', async () => {
    await runIdempotentTransaction(sources[0]!, { key: 'tx-1', tableName: table }, async (manager) => {
      await manager.query(`INSERT INTO \`${table}_refunds\` (\`id\`) VALUES (?)`, ['tx-1']);
      emit('tx-1:0');
      emit('tx-1:1');
    });
    await expect(
      runIdempotentTransaction(sources[0]!, { key: 'tx-2', tableName: table }, async (manager) => {
        await manager.query(`INSERT INTO \`${table}_refunds\` (\`id\`) VALUES (?)`, ['tx-2']);
        emit('tx-2:0');
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
    expect(await sources[0]!.query(`SELECT \`id\` FROM \`${table}_refunds\``)).toEqual([{ id: 'tx-1' }]);
    const run = makeIdempotent(
      async (n: number) => {
        emit(`${n}:0`);
        emit(`${n}:1`);
      },
      { store: stores[0]!, key: (n) => String(n), scope: 'maria-relays' },
    );
    await Promise.all(Array.from({ length: 30 }, (_, n) => run(n)));
    expect(await stores[0]!.outboxBacklog()).toMatchObject({ pending: 31 });

    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const sent: string[][] = [[], []];
    stores.forEach((store, index) => {
      const relay = new OutboxRelay(
        store,
        async (message: OutboxMessage) => {
          if (inFlight.has(message.id)) overlaps.push(message.id);
          inFlight.add(message.id);
          await new Promise((resolve) => setTimeout(resolve, 1));
          inFlight.delete(message.id);
          sent[index]!.push((message.data as { tag: string }).tag);
        },
        { batchSize: 4, pollInterval: 20 },
      );
      relays.push(relay);
      relay.start();
    });
    await waitFor('62 messages', () => sent[0]!.length + sent[1]!.length === 62, 20_000);
    expect(overlaps).toEqual([]);
    const all = [...sent[0]!, ...sent[1]!];
    expect(new Set(all).size).toBe(62);
    expect(all).not.toContain('tx-2:0');
    for (const tags of sent) {
      for (const prefix of ['tx-1', ...Array.from({ length: 30 }, (_, n) => String(n))]) {
        const second = tags.indexOf(`${prefix}:1`);
        if (second >= 0) expect(tags.indexOf(`${prefix}:0`)).toBeGreaterThanOrEqual(0);
        if (second >= 0) expect(tags.indexOf(`${prefix}:0`)).toBeLessThan(second);
      }
    }
    await waitFor('the backlog empty', async () => (await stores[0]!.outboxBacklog()).pending === 0);
    const purging = new OutboxRelay(stores[1]!, async () => undefined, { retention: 1, pollInterval: 20 });
    relays.push(purging);
    purging.start();
    await waitFor(
      'the sent rows purged',
      async () => Number((await sources[0]!.query(`SELECT COUNT(*) AS n FROM \`${table}_outbox\``))[0].n) === 0,
    );
  }, 30_000);
});
