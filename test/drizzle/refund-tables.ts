import { sql } from 'drizzle-orm';
import { int, mysqlTable, varchar as mysqlVarchar } from 'drizzle-orm/mysql-core';
import { integer, pgTable, serial, varchar } from 'drizzle-orm/pg-core';
import { DrizzleIdempotencyStore } from '../../lib/drizzle/index.js';
import { createMysqlDrizzle, createPgDrizzle } from './support.js';

/** A refund ledger on PostgreSQL: the business tables the idempotent transactions write. */
export const pgAccounts = pgTable('accounts', {
  id: serial('id').primaryKey(),
  balance: integer('balance').notNull(),
  version: integer('version').notNull().default(1),
});
export const pgRefunds = pgTable('refunds', {
  id: serial('id').primaryKey(),
  messageId: varchar('message_id', { length: 64 }).notNull().unique(),
  accountId: integer('account_id').notNull(),
  amount: integer('amount').notNull(),
});

/** The same ledger on MySQL / MariaDB. */
export const mysqlAccounts = mysqlTable('accounts', {
  id: int('id').autoincrement().primaryKey(),
  balance: int('balance').notNull(),
  version: int('version').notNull().default(1),
});
export const mysqlRefunds = mysqlTable('refunds', {
  id: int('id').autoincrement().primaryKey(),
  messageId: mysqlVarchar('message_id', { length: 64 }).notNull().unique(),
  accountId: int('account_id').notNull(),
  amount: int('amount').notNull(),
});

/**
 * One server under test, the same operations on either: a Drizzle database with the
 * ledger and the idempotency tables, and what the tests read of it.
 */
export interface Ledger {
  readonly name: 'PostgreSQL' | 'MariaDB';
  /** The Drizzle database (typed loosely: the tests run the same code on both drivers). */
  readonly db: any;
  readonly accounts: typeof pgAccounts | typeof mysqlAccounts;
  readonly refunds: typeof pgRefunds | typeof mysqlRefunds;
  readonly store: DrizzleIdempotencyStore;
  newAccount(balance: number): Promise<number>;
  balanceOf(accountId: number): Promise<number>;
  refundsOf(messageId: string): Promise<number>;
  /** Sessions of this database waiting on a row lock or the unique index right now. */
  lockWaiters(): Promise<number>;
  destroy(): Promise<void>;
}

export async function pgLedger(poolSize = 10): Promise<Ledger> {
  const fixture = await createPgDrizzle({ poolSize });
  await fixture.pool.query(`CREATE TABLE accounts (id serial PRIMARY KEY, balance integer NOT NULL, version integer NOT NULL DEFAULT 1)`);
  await fixture.pool.query(
    `CREATE TABLE refunds (id serial PRIMARY KEY, message_id varchar(64) NOT NULL UNIQUE, account_id integer NOT NULL, amount integer NOT NULL)`,
  );
  const store = new DrizzleIdempotencyStore(fixture.db);
  await store.ensureTable();
  const db = fixture.db;
  return {
    name: 'PostgreSQL',
    db,
    accounts: pgAccounts,
    refunds: pgRefunds,
    store,
    async newAccount(balance) {
      const [row] = await db.insert(pgAccounts).values({ balance }).returning({ id: pgAccounts.id });
      return row.id;
    },
    async balanceOf(accountId) {
      const rows = await db
        .select()
        .from(pgAccounts)
        .where(sql`${pgAccounts.id} = ${accountId}`);
      return rows[0].balance;
    },
    async refundsOf(messageId) {
      const rows = await db
        .select()
        .from(pgRefunds)
        .where(sql`${pgRefunds.messageId} = ${messageId}`);
      return rows.length;
    },
    async lockWaiters() {
      const { rows } = await fixture.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      return rows[0].n;
    },
    destroy: () => fixture.destroy(),
  };
}

export async function mariaLedger(poolSize = 10): Promise<Ledger> {
  const fixture = await createMysqlDrizzle({ poolSize });
  await fixture.pool.query(
    `CREATE TABLE accounts (id int AUTO_INCREMENT PRIMARY KEY, balance int NOT NULL, version int NOT NULL DEFAULT 1) ENGINE=InnoDB`,
  );
  await fixture.pool.query(
    `CREATE TABLE refunds (id int AUTO_INCREMENT PRIMARY KEY, message_id varchar(64) NOT NULL UNIQUE, account_id int NOT NULL, amount int NOT NULL) ENGINE=InnoDB`,
  );
  const store = new DrizzleIdempotencyStore(fixture.db);
  await store.ensureTable();
  const db = fixture.db;
  return {
    name: 'MariaDB',
    db,
    accounts: mysqlAccounts,
    refunds: mysqlRefunds,
    store,
    async newAccount(balance) {
      const [header] = await db.insert(mysqlAccounts).values({ balance });
      return header.insertId;
    },
    async balanceOf(accountId) {
      const rows = await db
        .select()
        .from(mysqlAccounts)
        .where(sql`${mysqlAccounts.id} = ${accountId}`);
      return rows[0].balance;
    },
    async refundsOf(messageId) {
      const rows = await db
        .select()
        .from(mysqlRefunds)
        .where(sql`${mysqlRefunds.messageId} = ${messageId}`);
      return rows.length;
    },
    async lockWaiters() {
      const [rows] = await fixture.pool.query(
        `SELECT COUNT(*) AS n FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = ?`,
        [fixture.database],
      );
      return Number((rows as Array<{ n: unknown }>)[0].n);
    },
    destroy: () => fixture.destroy(),
  };
}
