import 'reflect-metadata';
import { Controller, UseGuards, type INestMicroservice } from '@nestjs/common';
import { Ctx, EventPattern, Payload, type RmqContext } from '@nestjs/microservices';
import { Column, DataSource, Entity, PrimaryColumn } from 'typeorm';
import { Idempotent } from '../../lib/index.js';
import { type TransactionalRequest, type TransactionalResult } from '../../lib/core/index.js';
import { TypeOrmIdempotencyStore, getIdempotentEntityManager } from '../../lib/typeorm/index.js';
import { ConsumerEnv, channelObserverGuard, startRmqConsumer } from './rmq-app.js';
import { pgConnection as pg } from '../support/postgres.js';
import { RabbitProbe, uniqueName, waitFor, type Trace } from './support.js';

// The seed scenario: a refund consumer whose balance change and idempotency record commit
// in one PostgreSQL transaction, fed a failure, a redelivery and duplicates.

@Entity({ name: 'accounts' })
class Account {
  @PrimaryColumn('text')
  id: string;

  @Column('integer')
  balance: number;
}

@Entity({ name: 'refunds' })
class Refund {
  @PrimaryColumn('text')
  refundId: string;

  @Column('text')
  accountId: string;

  @Column('integer')
  amount: number;
}

interface RefundRequested {
  refundId: string;
  accountId: string;
  amount: number;
}

/** The PostgreSQL store, writing `committed:<n>` to the trace once a handler's transaction has committed. */
class TracingTypeOrmStore extends TypeOrmIdempotencyStore {
  commits = 0;
  constructor(
    dataSource: DataSource,
    private readonly trace: Trace,
  ) {
    super(dataSource);
  }
  override async runTransactional<T>(
    request: TransactionalRequest,
    work: () => Promise<{ value: T; result: string }>,
  ): Promise<TransactionalResult<T>> {
    const outcome = await super.runTransactional(request, work);
    if (outcome.kind === 'executed') this.trace.push(`committed:${++this.commits}`);
    return outcome;
  }
}

describe('seed scenario: a transactional refund consumer on RabbitMQ and PostgreSQL', () => {
  const schema = uniqueName('idem_refunds').replace(/-/g, '_');
  const queue = uniqueName('idem-seed');
  const env = new ConsumerEnv();
  const apps: INestMicroservice[] = [];
  let dataSource: DataSource;
  let store: TracingTypeOrmStore;
  let probe: RabbitProbe;
  /** Runs inside the handler's transaction, after its writes. */
  let afterWrites: ((data: RefundRequested, context: RmqContext) => Promise<void>) | undefined;

  @Controller()
  @UseGuards(channelObserverGuard(env))
  class RefundConsumer {
    @EventPattern<string>('refund.requested')
    @Idempotent({ ack: true, transactional: true })
    async refund(@Payload() data: RefundRequested, @Ctx() context: RmqContext): Promise<void> {
      env.attempts.hit(data.refundId);
      const manager = getIdempotentEntityManager();
      await manager.decrement(Account, { id: data.accountId }, 'balance', data.amount);
      await manager.insert(Refund, { refundId: data.refundId, accountId: data.accountId, amount: data.amount });
      await afterWrites?.(data, context);
    }
  }

  /** True while another transaction waits on a lock in this test's schema (the duplicate blocked on the record). */
  const duplicateBlocked = async () => {
    const rows: { n: number }[] = await dataSource.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`,
      [schema],
    );
    return rows[0].n > 0;
  };
  const balance = async (id: string) => (await dataSource.getRepository(Account).findOneByOrFail({ id })).balance;

  beforeAll(async () => {
    const admin = new DataSource({ ...pg, poolSize: 1 });
    await admin.initialize();
    await admin.query(`CREATE SCHEMA "${schema}"`);
    await admin.destroy();
    dataSource = new DataSource({ ...pg, schema, entities: [Account, Refund], synchronize: true, poolSize: 6, logging: false });
    await dataSource.initialize();
    store = new TracingTypeOrmStore(dataSource, env.trace);
    await store.ensureTable();
    probe = await RabbitProbe.open();
    // Two instances of the consumer on one queue, sharing the PostgreSQL store.
    apps.push(await startRmqConsumer({ queue, store, env, controller: RefundConsumer }));
    apps.push(await startRmqConsumer({ queue, store, env, controller: RefundConsumer }));
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    const left = await probe?.readyCount(queue);
    await probe?.deleteQueues(queue);
    await probe?.close();
    await dataSource?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await dataSource?.destroy();
    expect(left).toBe(0);
  });

  it('changes the balance exactly once across a rolled-back failure, a redelivery during the commit, and duplicates', async () => {
    const accountId = uniqueName('acc');
    await dataSource.getRepository(Account).insert({ id: accountId, balance: 10_000 });
    const refundId = uniqueName('refund');
    const message = { refundId, accountId, amount: 2_500 };

    let attempt = 0;
    afterWrites = async (data, context) => {
      if (data.refundId !== refundId) return;
      attempt++;
      // Attempt 1 fails after its writes: they roll back with the record, the delivery is requeued.
      if (attempt === 1) throw new Error('ledger timeout');
      if (attempt === 2) {
        // Attempt 2 loses its channel before committing: the broker redelivers the message
        // to the other instance, whose transaction blocks on the record until this one commits.
        await context.getChannelRef().close();
        await waitFor('the redelivery to block on the record', duplicateBlocked);
      }
    };
    probe.publish(queue, 'refund.requested', message, { messageId: refundId });
    await waitFor('the redelivery acked', () => env.observer.count('ack', refundId) === 1);
    for (let i = 0; i < 4; i++) probe.publish(queue, 'refund.requested', message, { messageId: refundId });
    // A second refund of the same account, published twice at once.
    const otherId = uniqueName('refund');
    probe.publish(queue, 'refund.requested', { refundId: otherId, accountId, amount: 1_000 }, { messageId: otherId });
    probe.publish(queue, 'refund.requested', { refundId: otherId, accountId, amount: 1_000 }, { messageId: otherId });
    await waitFor('every delivery acked', () => env.observer.count('ack', refundId) === 5 && env.observer.count('ack', otherId) === 2);

    expect(await balance(accountId)).toBe(10_000 - 2_500 - 1_000);
    expect(await dataSource.getRepository(Refund).countBy({ accountId })).toBe(2);
    expect(env.attempts.count(refundId)).toBe(2);
    expect(env.attempts.count(otherId)).toBe(1);
    // Nacked on failure, acked only after the commit (the committing delivery's own ack hit its closed channel).
    const trace = env.trace.filter((t) => t.endsWith(refundId) || t === 'committed:1');
    expect(trace).toEqual([`nack:${refundId}`, 'committed:1', `ack-failed:${refundId}`, ...Array(5).fill(`ack:${refundId}`)]);
    expect(env.observer.settlements.find((s) => s.kind === 'nack' && s.messageId === refundId)).toMatchObject({ requeue: true });
  });
});
