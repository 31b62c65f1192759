import { randomUUID } from 'node:crypto';
import { Column, Entity, PrimaryColumn, PrimaryGeneratedColumn, type DataSource } from 'typeorm';
import { isIdempotencyError } from '../../lib/core/errors.js';
import {
  IdempotentEntity,
  IllegalStateTransitionError,
  OptimisticLockError,
  VersionedEntity,
  applyTransition,
  defineStateMachine,
  idemKeyIndexNameOf,
  insertOrGet,
  insertOrGetExisting,
  isUniqueViolation,
  retryOnOptimisticLock,
  updateWithVersion,
} from '../../lib/typeorm/index.js';
import { Account, RefundRecord } from './refund.entities.js';
import { createMariaDataSource } from './mariadb/support.js';
import { createPgDataSource, createSqljsDataSource } from './support.js';

const orderLifecycle = defineStateMachine(
  {
    pending: ['paid', 'cancelled'],
    paid: ['shipped', 'refunding'],
    shipped: ['completed'],
  },
  { name: 'Order' },
);
type OrderState = (typeof orderLifecycle.states)[number];

@Entity('orders')
class Order extends VersionedEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('varchar', { length: 32 })
  status: OrderState;

  @Column('varchar', { nullable: true, name: 'paid_by' })
  paidBy: string | null;
}

/** A primary key the caller chooses, so an insert can collide on it rather than on idem_key. */
@Entity('vouchers')
class Voucher extends IdempotentEntity {
  @PrimaryColumn('varchar', { length: 64 })
  code: string;
}

const entities = [RefundRecord, Account, Order, Voucher];

describe('state machine (pure)', () => {
  it('treats the current state as an idempotent no-op and declared moves as transitions', () => {
    expect(orderLifecycle.decide('paid', 'paid')).toBe('noop');
    expect(orderLifecycle.decide('pending', 'paid')).toBe('apply');
    expect(orderLifecycle.canTransition('shipped', 'completed')).toBe(true);
    expect(orderLifecycle.canTransition('cancelled', 'shipped')).toBe(false);
    expect(orderLifecycle.targetsOf('paid')).toEqual(['shipped', 'refunding']);
    expect(orderLifecycle.isFinal('cancelled')).toBe(true);
    expect(orderLifecycle.isFinal('pending')).toBe(false);
    expect([...orderLifecycle.states].sort()).toEqual(['cancelled', 'completed', 'paid', 'pending', 'refunding', 'shipped']);
    expect(orderLifecycle.isState('paid')).toBe(true);
    expect(orderLifecycle.isState('lost')).toBe(false);
  });

  it('throws a clear, coded error naming from, to and the allowed targets', () => {
    let error: unknown;
    try {
      orderLifecycle.assertTransition('pending', 'shipped');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(IllegalStateTransitionError);
    expect(isIdempotencyError(error)).toBe(true);
    expect(error).toMatchObject({
      code: 'IDEMPOTENCY_ILLEGAL_TRANSITION',
      status: 409,
      from: 'pending',
      to: 'shipped',
      allowed: ['paid', 'cancelled'],
    });
    expect((error as Error).message).toBe(
      "Order: illegal transition from 'pending' to 'shipped' (allowed from 'pending': 'paid', 'cancelled').",
    );
    expect(() => orderLifecycle.decide('cancelled', 'shipped')).toThrow("no transition leaves 'cancelled'");
    expect(() => orderLifecycle.decide('pending', 'lost' as OrderState)).toThrow(IllegalStateTransitionError);
  });

  it('rejects a malformed table', () => {
    expect(() => defineStateMachine({ a: 'b' as unknown as string[] })).toThrow(/must be an array/);
  });
});

describe('isUniqueViolation (driver shapes)', () => {
  it('recognises MySQL, SQL Server, Oracle and SQLite codes and ignores other constraint failures', () => {
    expect(isUniqueViolation({ code: 'ER_DUP_ENTRY', errno: 1062 })).toBe(true);
    expect(isUniqueViolation({ errno: 1062 })).toBe(true);
    expect(isUniqueViolation({ number: 2627 })).toBe(true);
    expect(isUniqueViolation(new Error('ORA-00001: unique constraint (X.Y) violated'))).toBe(true);
    expect(isUniqueViolation({ code: 'SQLITE_CONSTRAINT', message: 'SQLITE_CONSTRAINT: UNIQUE constraint failed: t.k' })).toBe(true);
    expect(isUniqueViolation({ code: 'SQLITE_CONSTRAINT_UNIQUE', message: 'x' })).toBe(true);
    expect(isUniqueViolation({ code: 'SQLITE_CONSTRAINT', message: 'SQLITE_CONSTRAINT: NOT NULL constraint failed: t.k' })).toBe(false);
    expect(isUniqueViolation(new Error('wrapped', { cause: { code: '23505' } }))).toBe(true);
    expect(isUniqueViolation({ code: '23503' })).toBe(false);
    expect(isUniqueViolation(null)).toBe(false);
    expect(isUniqueViolation('23505')).toBe(false);
  });
});

const backends: Array<[string, () => Promise<{ dataSource: DataSource; destroy: () => Promise<void> }>]> = [
  ['PostgreSQL', async () => createPgDataSource({ entities, poolSize: 8 })],
  ['MariaDB', async () => createMariaDataSource({ entities, poolSize: 8 })],
  [
    'SQLite (sql.js)',
    async () => {
      const dataSource = await createSqljsDataSource({ entities });
      return { dataSource, destroy: () => dataSource.destroy() };
    },
  ],
];

describe.each(backends)('entity helpers on %s', (backend, open) => {
  let dataSource: DataSource;
  let destroy: () => Promise<void>;
  const isPostgres = backend === 'PostgreSQL';

  beforeAll(async () => {
    ({ dataSource, destroy } = await open());
  });
  afterAll(async () => {
    await destroy();
  });

  const newAccount = async () => dataSource.getRepository(Account).save({ balance: 100 });
  const newOrder = async (status: OrderState = 'pending') => dataSource.getRepository(Order).save({ status, paidBy: null });

  describe('optimistic locking', () => {
    it('lets exactly one of two concurrent updates with the same expected version win', async () => {
      const account = await newAccount();
      expect(account.version).toBe(1);
      const settled = await Promise.allSettled([
        updateWithVersion(dataSource.manager, Account, account.id, 1, { balance: 90 }),
        updateWithVersion(dataSource.manager, Account, account.id, 1, { balance: 80 }),
      ]);
      const won = settled.filter((s) => s.status === 'fulfilled');
      const lost = settled.filter((s) => s.status === 'rejected') as PromiseRejectedResult[];
      expect(won).toHaveLength(1);
      expect((won[0] as PromiseFulfilledResult<number>).value).toBe(2);
      expect(lost).toHaveLength(1);
      expect(lost[0].reason).toBeInstanceOf(OptimisticLockError);
      expect(lost[0].reason).toMatchObject({
        code: 'IDEMPOTENCY_OPTIMISTIC_LOCK',
        expectedVersion: 1,
        actualVersion: 2,
        entity: 'Account',
      });
      const row = await dataSource.getRepository(Account).findOneByOrFail({ id: account.id });
      expect(row.version).toBe(2);
      expect([90, 80]).toContain(row.balance);
    });

    it('reports a missing row as a conflict too', async () => {
      await expect(updateWithVersion(dataSource.manager, Account, 987654, 1, { balance: 1 })).rejects.toMatchObject({
        name: 'OptimisticLockError',
        actualVersion: undefined,
      });
    });

    it('makes both conflicting writers land, one after the other, with retryOnOptimisticLock', async () => {
      const account = await newAccount();
      // Both writers read before either writes, so the first attempt of one must conflict.
      let reads = 0;
      let release!: () => void;
      const bothRead = new Promise<void>((resolve) => (release = resolve));
      let attempts = 0;
      const append = (note: string, amount: number) =>
        retryOnOptimisticLock(
          async (attempt) => {
            attempts++;
            const current = await dataSource.getRepository(Account).findOneByOrFail({ id: account.id });
            if (attempt === 0 && ++reads === 2) release();
            if (attempt === 0) await bothRead;
            return updateWithVersion(dataSource.manager, Account, account.id, current.version, {
              notes: current.notes + note,
              balance: current.balance + amount,
            });
          },
          { retries: 5, backoff: 5 },
        );
      const versions = await Promise.all([append('A', 1), append('B', 10)]);
      expect(versions.sort()).toEqual([2, 3]);
      expect(attempts).toBe(3);
      const row = await dataSource.getRepository(Account).findOneByOrFail({ id: account.id });
      expect(row).toMatchObject({ version: 3, balance: 111 });
      expect(row.notes.split('').sort()).toEqual(['A', 'B']);
    });

    it('gives up after the last retry and rethrows other errors at once', async () => {
      let calls = 0;
      const conflict = new OptimisticLockError('Account', 1, 1, 2);
      await expect(
        retryOnOptimisticLock(
          async () => {
            calls++;
            throw conflict;
          },
          { retries: 2, backoff: 0 },
        ),
      ).rejects.toBe(conflict);
      expect(calls).toBe(3);
      calls = 0;
      await expect(
        retryOnOptimisticLock(
          async () => {
            calls++;
            throw new Error('other');
          },
          { retries: 2 },
        ),
      ).rejects.toThrow('other');
      expect(calls).toBe(1);
    });
  });

  describe('insertOrGetExisting', () => {
    it('returns the existing row for a duplicate idem_key instead of throwing', async () => {
      const account = await newAccount();
      const idemKey = randomUUID();
      const first = await insertOrGet(dataSource.manager, RefundRecord, { idemKey, accountId: account.id, amount: 5 });
      expect(first.created).toBe(true);
      expect(first.entity).toMatchObject({ idemKey, amount: 5, version: 1 });
      const second = await insertOrGetExisting(dataSource.manager, RefundRecord, { idemKey, accountId: account.id, amount: 999 });
      expect(second).toBeInstanceOf(RefundRecord);
      expect(second).toMatchObject({ id: first.entity.id, idemKey, amount: 5 });
      expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey })).toBe(1);
    });

    it('keeps the surrounding transaction usable after a duplicate', async () => {
      const account = await newAccount();
      const idemKey = randomUUID();
      await insertOrGetExisting(dataSource.manager, RefundRecord, { idemKey, accountId: account.id, amount: 5 });
      await dataSource.transaction(async (manager) => {
        const existing = await insertOrGet(manager, RefundRecord, { idemKey, accountId: account.id, amount: 6 });
        expect(existing.created).toBe(false);
        await manager.increment(Account, { id: account.id }, 'balance', 1); // would fail in an aborted PostgreSQL transaction
      });
      expect((await dataSource.getRepository(Account).findOneByOrFail({ id: account.id })).balance).toBe(101);
    });

    it('creates the row once when 10 inserts of one idem_key race', async () => {
      const account = await newAccount();
      const idemKey = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 10 }, (_, i) => insertOrGet(dataSource.manager, RefundRecord, { idemKey, accountId: account.id, amount: i })),
      );
      expect(results.filter((r) => r.created)).toHaveLength(1);
      expect(new Set(results.map((r) => r.entity.id)).size).toBe(1);
    });

    it('throws on a conflict with another unique index', async () => {
      const code = randomUUID();
      await insertOrGetExisting(dataSource.manager, Voucher, { code, idemKey: randomUUID() });
      await expect(insertOrGetExisting(dataSource.manager, Voucher, { code, idemKey: randomUUID() })).rejects.toThrow(
        /unique index other than 'idemKey'/,
      );
    });

    it('enforces the unique index on idem_key that save() would hit', async () => {
      const account = await newAccount();
      const idemKey = randomUUID();
      await dataSource.getRepository(RefundRecord).save({ idemKey, accountId: account.id, amount: 1 });
      const error = await dataSource
        .getRepository(RefundRecord)
        .save({ idemKey, accountId: account.id, amount: 2 })
        .then(
          () => undefined,
          (caught: unknown) => caught,
        );
      expect(isUniqueViolation(error)).toBe(true);
      const name = idemKeyIndexNameOf(dataSource, RefundRecord);
      expect(name).toMatch(/^IDX_/);
      if (isPostgres) {
        expect((error as { driverError: { constraint: string } }).driverError.constraint).toBe(name);
        expect(isUniqueViolation(new Error('not null', { cause: { code: '23502' } }))).toBe(false);
      }
    });
  });

  describe('state transitions', () => {
    it('pays an order once: the second payment is a no-op', async () => {
      const order = await newOrder();
      const first = await applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'paid', { changes: { paidBy: 'card-1' } });
      expect(first).toEqual({ applied: true, from: 'pending', to: 'paid', version: 2 });
      const second = await applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'paid', { changes: { paidBy: 'card-2' } });
      expect(second).toEqual({ applied: false, from: 'paid', to: 'paid', version: 2 });
      expect(await dataSource.getRepository(Order).findOneByOrFail({ id: order.id })).toMatchObject({
        status: 'paid',
        version: 2,
        paidBy: 'card-1',
      });
    });

    it('refuses to ship a cancelled order', async () => {
      const order = await newOrder('cancelled');
      await expect(applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'shipped')).rejects.toMatchObject({
        name: 'IllegalStateTransitionError',
        code: 'IDEMPOTENCY_ILLEGAL_TRANSITION',
        from: 'cancelled',
        to: 'shipped',
      });
      expect(await dataSource.getRepository(Order).findOneByOrFail({ id: order.id })).toMatchObject({ status: 'cancelled', version: 1 });
    });

    it('turns a concurrent duplicate transition into a no-op (one applies, the other sees it done)', async () => {
      const order = await newOrder();
      const outcomes = await Promise.all(
        [1, 2].map(() =>
          applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'paid', { from: 'pending', expectedVersion: 1 }),
        ),
      );
      expect(outcomes.map((o) => o.applied).sort()).toEqual([false, true]);
      expect(await dataSource.getRepository(Order).findOneByOrFail({ id: order.id })).toMatchObject({ status: 'paid', version: 2 });
    });

    it('tells a stale caller whether its transition became illegal or merely conflicts', async () => {
      const order = await newOrder();
      await applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'paid');
      // The caller still believes the order is pending at version 1.
      await expect(
        applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'cancelled', { from: 'pending', expectedVersion: 1 }),
      ).rejects.toBeInstanceOf(IllegalStateTransitionError);
      // Still paid, but someone else bumped the version: shipping is legal, the write conflicts.
      await updateWithVersion(dataSource.manager, Order, order.id, 2, { paidBy: 'corrected' });
      await expect(
        applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'shipped', { from: 'paid', expectedVersion: 2 }),
      ).rejects.toMatchObject({ name: 'OptimisticLockError', expectedVersion: 2, actualVersion: 3 });
      expect(
        await applyTransition(dataSource.manager, Order, order.id, orderLifecycle, 'shipped', { from: 'paid', expectedVersion: 3 }),
      ).toMatchObject({
        applied: true,
        version: 4,
      });
    });
  });
});
