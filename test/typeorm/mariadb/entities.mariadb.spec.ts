import { randomUUID } from 'node:crypto';
import { Column, Entity, PrimaryGeneratedColumn, type DataSource, type QueryRunner } from 'typeorm';
import {
  OptimisticLockError,
  VersionedEntity,
  applyTransition,
  defineStateMachine,
  insertOrGet,
  isUniqueViolation,
  updateWithVersion,
} from '../../../lib/typeorm/index.js';
import { Account, RefundRecord } from '../refund.entities.js';
import { createMariaDataSource } from './support.js';

const lifecycle = defineStateMachine({ pending: ['paid', 'cancelled'], paid: ['shipped'] }, { name: 'Order' });

@Entity('orders')
class Order extends VersionedEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('varchar', { length: 32 })
  status: string;
}

// Inside a REPEATABLE READ transaction (InnoDB's default) a plain SELECT answers from the
// snapshot of the transaction's first read. A concurrent commit after that snapshot makes
// the helpers' conditional write miss (or their insert collide); what they then read must
// be the committed row, not the snapshot's.
describe('entity helpers inside REPEATABLE READ transactions on MariaDB', () => {
  let db: Awaited<ReturnType<typeof createMariaDataSource>>;
  let dataSource: DataSource;

  beforeAll(async () => {
    db = await createMariaDataSource({ entities: [RefundRecord, Account, Order], poolSize: 6 });
    dataSource = db.dataSource;
  });
  afterAll(async () => {
    await db.destroy();
  });

  /** A REPEATABLE READ transaction whose snapshot is taken now (by a first read). */
  async function snapshotNow(): Promise<QueryRunner> {
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    await runner.startTransaction('REPEATABLE READ');
    await runner.query('SELECT COUNT(*) FROM accounts');
    return runner;
  }

  async function inSnapshot<T>(fn: (runner: QueryRunner) => Promise<T>, concurrently: () => Promise<unknown>): Promise<T> {
    const runner = await snapshotNow();
    try {
      await concurrently();
      const result = await fn(runner);
      await runner.commitTransaction();
      return result;
    } finally {
      if (runner.isTransactionActive) await runner.rollbackTransaction();
      await runner.release();
    }
  }

  it('insertOrGet returns the duplicate that another transaction committed after the snapshot', async () => {
    const account = await dataSource.getRepository(Account).save({ balance: 100 });
    const idemKey = randomUUID();
    const result = await inSnapshot(
      (runner) => insertOrGet(runner.manager, RefundRecord, { idemKey, accountId: account.id, amount: 2 }),
      () => dataSource.getRepository(RefundRecord).insert({ idemKey, accountId: account.id, amount: 1 }),
    );
    expect(result.created).toBe(false);
    expect(result.entity).toMatchObject({ idemKey, amount: 1 });
  });

  it('applyTransition sees that a concurrent duplicate already moved the row: a no-op, not a conflict', async () => {
    const order = await dataSource.getRepository(Order).save({ status: 'pending' });
    const outcome = await inSnapshot(
      (runner) => applyTransition(runner.manager, Order, order.id, lifecycle, 'paid', { from: 'pending', expectedVersion: 1 }),
      () => applyTransition(dataSource.manager, Order, order.id, lifecycle, 'paid'),
    );
    expect(outcome).toEqual({ applied: false, from: 'paid', to: 'paid', version: 2 });
  });

  it('updateWithVersion reports the version the concurrent writer committed', async () => {
    const account = await dataSource.getRepository(Account).save({ balance: 100 });
    const error = await inSnapshot(
      (runner) => updateWithVersion(runner.manager, Account, account.id, 1, { balance: 90 }),
      () => updateWithVersion(dataSource.manager, Account, account.id, 1, { balance: 80 }),
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OptimisticLockError);
    expect(error).toMatchObject({ expectedVersion: 1, actualVersion: 2 });
  });

  it('recognises ER_DUP_ENTRY (1062) from the server', async () => {
    const account = await dataSource.getRepository(Account).save({ balance: 1 });
    const idemKey = randomUUID();
    await dataSource.getRepository(RefundRecord).insert({ idemKey, accountId: account.id, amount: 1 });
    const error = await dataSource
      .getRepository(RefundRecord)
      .insert({ idemKey, accountId: account.id, amount: 1 })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect((error as { driverError: { errno: number; code: string } }).driverError).toMatchObject({ errno: 1062, code: 'ER_DUP_ENTRY' });
    expect(isUniqueViolation(error)).toBe(true);
  });
});
