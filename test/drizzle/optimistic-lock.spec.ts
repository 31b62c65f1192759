import { eq } from 'drizzle-orm';
import { int, mysqlTable, primaryKey as mysqlPrimaryKey, varchar as mysqlVarchar } from 'drizzle-orm/mysql-core';
import { integer, pgTable, primaryKey, varchar } from 'drizzle-orm/pg-core';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { OptimisticLockError, isOptimisticLockConflict, retryOnOptimisticLock, updateWithVersion } from '../../lib/drizzle/index.js';
import { mariaLedger, pgLedger, type Ledger } from './refund-tables.js';

const pgStock = pgTable(
  'stock',
  {
    warehouse: varchar('warehouse', { length: 16 }).notNull(),
    sku: varchar('sku', { length: 16 }).notNull(),
    count: integer('count').notNull(),
    rev: integer('rev').notNull(),
  },
  (t) => [primaryKey({ columns: [t.warehouse, t.sku] })],
);
const mysqlStock = mysqlTable(
  'stock',
  {
    warehouse: mysqlVarchar('warehouse', { length: 16 }).notNull(),
    sku: mysqlVarchar('sku', { length: 16 }).notNull(),
    count: int('count').notNull(),
    rev: int('rev').notNull(),
  },
  (t) => [mysqlPrimaryKey({ columns: [t.warehouse, t.sku] })],
);

describe.each([
  ['PostgreSQL', pgLedger, pgStock],
  ['MariaDB', mariaLedger, mysqlStock],
] as const)('updateWithVersion on Drizzle (%s)', (_name, makeLedger, stock) => {
  let ledger: Ledger;

  beforeAll(async () => {
    ledger = await makeLedger(12);
    await ledger.db.execute(
      'CREATE TABLE stock (warehouse varchar(16) NOT NULL, sku varchar(16) NOT NULL, count integer NOT NULL, rev integer NOT NULL, PRIMARY KEY (warehouse, sku))',
    );
  });
  afterAll(async () => {
    await ledger.destroy();
  });

  const readAccount = async (id: number) => (await ledger.db.select().from(ledger.accounts).where(eq(ledger.accounts.id, id)))[0];

  it('updates the row at the version read, once, and returns the next version', async () => {
    const id = await ledger.newAccount(100);
    const account = await readAccount(id);
    expect(account.version).toBe(1);
    expect(await updateWithVersion(ledger.db, ledger.accounts, id, account.version, { balance: 90 })).toBe(2);
    expect(await readAccount(id)).toMatchObject({ balance: 90, version: 2 });
    // The same stale version again: refused with what the database holds now.
    const error = await updateWithVersion(ledger.db, ledger.accounts, id, account.version, { balance: 80 }).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(OptimisticLockError);
    expect(error).toMatchObject({ entity: 'accounts', id, expectedVersion: 1, actualVersion: 2, status: 409 });
    expect(isOptimisticLockConflict(error)).toBe(true);
    expect(await readAccount(id)).toMatchObject({ balance: 90, version: 2 });
    const gone = await updateWithVersion(ledger.db, ledger.accounts, 999_999, 1, { balance: 1 }).catch((caught: unknown) => caught);
    expect(gone).toMatchObject({ actualVersion: undefined });
  });

  it('sees the latest commit inside a transaction (the conflict names the version another writer committed)', async () => {
    const id = await ledger.newAccount(100);
    await ledger.db.transaction(async (tx: Ledger['db']) => {
      const [before] = await tx.select().from(ledger.accounts).where(eq(ledger.accounts.id, id));
      // Another writer commits in between.
      await updateWithVersion(ledger.db, ledger.accounts, id, 1, { balance: 50 });
      await expect(updateWithVersion(tx, ledger.accounts, id, before.version, { balance: before.balance - 1 })).rejects.toMatchObject({
        actualVersion: 2,
      });
    });
  });

  it('applies concurrent read-modify-writes each once with retryOnOptimisticLock', async () => {
    const id = await ledger.newAccount(0);
    await Promise.all(
      Array.from({ length: 8 }, () =>
        retryOnOptimisticLock(
          async () => {
            const account = await readAccount(id);
            await updateWithVersion(ledger.db, ledger.accounts, id, account.version, { balance: account.balance + 5 });
          },
          { retries: 50, backoff: 5 },
        ),
      ),
    );
    expect(await readAccount(id)).toMatchObject({ balance: 40, version: 9 });
  });

  it('takes a composite key as an object and a version column of another name', async () => {
    await ledger.db.insert(stock).values({ warehouse: 'w1', sku: 'a', count: 3, rev: 7 });
    expect(await updateWithVersion(ledger.db, stock, { warehouse: 'w1', sku: 'a' }, 7, { count: 2 }, { version: 'rev' })).toBe(8);
    await expect(updateWithVersion(ledger.db, stock, 'w1', 8, { count: 1 }, { version: 'rev' })).rejects.toThrow(/composite primary key/);
    await expect(updateWithVersion(ledger.db, stock, { warehouse: 'w1', sku: 'a' }, 8, { count: 1 })).rejects.toThrow(
      IdempotencyConfigurationError,
    );
    await expect(updateWithVersion(ledger.db, stock, { warehouse: 'w1' }, 8, { count: 1 }, { version: 'rev' })).rejects.toThrow(
      /lacks 'sku'/,
    );
  });
});
