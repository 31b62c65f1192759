import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { OutboxRelay } from '../../lib/core/outbox-relay.js';
import type { IdempotencyOutboxStore, OutboxMessage } from '../../lib/core/outbox-store.js';
import type { IdempotencyStore } from '../../lib/index.js';
import { DrizzleIdempotencyStore, runIdempotentTransaction as drizzleTransaction } from '../../lib/drizzle/index.js';
import { PrismaIdempotencyStore, runIdempotentTransaction as prismaTransaction } from '../../lib/prisma/index.js';
import { waitFor } from '../messages/support.js';
import { createPgDrizzle } from '../drizzle/support.js';
import { createPgDatabase } from '../prisma/support.js';

/**
 * Issue 44 on Prisma and Drizzle (PostgreSQL): runIdempotentTransaction stages the
 * messages its work emits in its transaction, and the store's relay sends them.
 */
interface Backend {
  store: IdempotencyStore & IdempotencyOutboxStore;
  /** Runs `work` in an idempotent transaction under `key`. */
  transact(key: string, work: () => Promise<string>): Promise<string>;
  destroy(): Promise<void>;
}

const backends: Array<[string, () => Promise<Backend>]> = [
  [
    'Prisma',
    async () => {
      const db = await createPgDatabase(4);
      const store = new PrismaIdempotencyStore(db.prisma);
      await store.ensureTable();
      return { store, transact: (key, work) => prismaTransaction(db.prisma, { key }, () => work()), destroy: () => db.destroy() };
    },
  ],
  [
    'Drizzle',
    async () => {
      const db = await createPgDrizzle({ poolSize: 4 });
      const store = new DrizzleIdempotencyStore(db.db);
      await store.ensureTable();
      return { store, transact: (key, work) => drizzleTransaction(db.db, { key }, () => work()), destroy: () => db.destroy() };
    },
  ],
];

describe.each(backends)('the outbox on %s (PostgreSQL)', (_name, open) => {
  let backend: Backend;
  let relay: OutboxRelay | undefined;
  const sent: OutboxMessage[] = [];

  beforeAll(async () => {
    backend = await open();
  }, 60_000);
  afterAll(async () => {
    await relay?.stop();
    await backend?.destroy();
  });

  it('stages with the commit, stages nothing for a rollback, and its relay sends what committed', async () => {
    const emit = (tag: string) => stageOutboxMessage('EVENTS', 'refund.completed', { tag }).message.id;
    const id = await backend.transact('k-1', async () => emit('committed'));
    await expect(
      backend.transact('k-2', async () => {
        emit('rolled-back');
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
    expect(await backend.store.outboxBacklog()).toMatchObject({ pending: 1 });
    relay = new OutboxRelay(backend.store, async (message) => void sent.push(message), { pollInterval: 20 });
    relay.start();
    await waitFor('the committed message', () => sent.length === 1);
    expect(sent[0]).toMatchObject({ id, data: { tag: 'committed' } });
    await waitFor('the backlog empty', async () => (await backend.store.outboxBacklog()).pending === 0);
    expect(sent).toHaveLength(1);
  });
});
