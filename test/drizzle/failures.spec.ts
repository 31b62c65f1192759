import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { withReplicas } from 'drizzle-orm/pg-core';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { createConnection } from 'mysql2/promise';
import { Client } from 'pg';
import { IdempotencyConfigurationError, IdempotencyStoreUnavailableError } from '../../lib/core/errors.js';
import { storageKeyOf } from '../../lib/core/hash.js';
import { DrizzleIdempotencyStore, runIdempotentTransaction } from '../../lib/drizzle/index.js';
import { drizzleDriverOf } from '../../lib/drizzle/drizzle-internals.js';
import { mariaLedger, pgLedger, type Ledger } from './refund-tables.js';
import { mysqlPoolConfig, pgPoolConfig, waitUntil } from './support.js';

/** Ends the session of `tx` from another connection, as a failover or an admin would. */
const killers = {
  PostgreSQL: async (ledger: Ledger, tx: Ledger['db']) => {
    const { rows } = await tx.execute(sql`SELECT pg_backend_pid() AS pid`);
    await ledger.db.execute(sql`SELECT pg_terminate_backend(${rows[0].pid}::int)`);
  },
  MariaDB: async (ledger: Ledger, tx: Ledger['db']) => {
    const [rows] = await tx.execute(sql`SELECT CONNECTION_ID() AS id`);
    await ledger.db.execute(sql.raw(`KILL CONNECTION ${Number(rows[0].id)}`));
    // Until mysql2 sees the socket close, the next query may instead die writing to it
    // (EPIPE), an error made by Node's net module, which Jest's sandbox does not see as an
    // Error (lib/sql/failures.ts walks causes with instanceof): wait for the close.
    const connection = (drizzleDriverOf(tx)?.client as unknown as { connection: { state: string } }).connection;
    await waitUntil(() => connection.state === 'error' || connection.state === 'disconnected', {
      what: 'mysql2 to see the killed session',
    });
  },
};

describe.each([
  ['PostgreSQL', pgLedger],
  ['MariaDB', mariaLedger],
] as const)('Drizzle transactions whose connection is cut (%s)', (name, makeLedger) => {
  let ledger: Ledger;

  beforeAll(async () => {
    ledger = await makeLedger(6);
  });
  afterAll(async () => {
    await ledger.destroy();
  });

  it('answers IdempotencyStoreUnavailableError (503, retriable), commits nothing, and the retry runs once', async () => {
    const accountId = await ledger.newAccount(100);
    const key = randomUUID();
    const refundThrough = async (tx: Ledger['db'], cut: boolean) => {
      await tx.insert(ledger.refunds).values({ messageId: key, accountId, amount: 10 });
      if (cut) await killers[name](ledger, tx);
      await tx
        .update(ledger.accounts)
        .set({ balance: 90 })
        .where(sql`${ledger.accounts.id} = ${accountId}`);
      return 'refunded';
    };
    const error = await runIdempotentTransaction(ledger.db, { key }, (tx: Ledger['db']) => refundThrough(tx, true)).catch(
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(await ledger.refundsOf(key)).toBe(0);
    expect(await ledger.store.get(storageKeyOf('transaction', key))).toBeUndefined();
    // The pool dropped the dead connection: the retry gets a working one.
    expect(await runIdempotentTransaction(ledger.db, { key }, (tx: Ledger['db']) => refundThrough(tx, false))).toBe('refunded');
    expect(await ledger.balanceOf(accountId)).toBe(90);
  });

  it('keeps a listener on every checked-out pg client, so a session the server ends cannot crash the process', async () => {
    if (name !== 'PostgreSQL') return;
    await runIdempotentTransaction(ledger.db, { key: randomUUID() }, async (tx: Ledger['db']) => {
      const client = drizzleDriverOf(tx)!.client as unknown as { listeners(event: string): unknown[] };
      // pg-pool takes its own idle listener off a client it hands out.
      expect(client.listeners('error').length).toBeGreaterThan(0);
    });
  });

  it('keeps the work’s own errors as they are (a unique violation of the work is not an outage)', async () => {
    const accountId = await ledger.newAccount(100);
    const messageId = randomUUID();
    await ledger.db.insert(ledger.refunds).values({ messageId, accountId, amount: 1 });
    const error = await runIdempotentTransaction(ledger.db, { key: randomUUID() }, async (tx: Ledger['db']) => {
      await tx.insert(ledger.refunds).values({ messageId, accountId, amount: 1 });
    }).catch((caught: unknown) => caught);
    expect(error).not.toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(String((error as Error).message)).toMatch(/Failed query: insert into/i);
  });
});

describe('what the Drizzle store accepts', () => {
  it('recognises node-postgres and mysql2 databases made on a pool or on one client', async () => {
    const pgClient = new Client(pgPoolConfig());
    const mysqlConnection = await createConnection(mysqlPoolConfig('mysql'));
    try {
      expect(drizzleDriverOf(drizzlePg(pgClient))).toMatchObject({ dialect: 'postgres', pool: undefined });
      expect(drizzleDriverOf(drizzleMysql(mysqlConnection))).toMatchObject({ dialect: 'mysql', pool: undefined });
      // withReplicas(): the records go to the primary, whose session the replicated database keeps.
      const primary = drizzlePg(pgClient);
      expect(drizzleDriverOf(withReplicas(primary, [drizzlePg(new Client(pgPoolConfig()))]))?.client).toBe(
        drizzleDriverOf(primary)?.client,
      );
      const onClient = new DrizzleIdempotencyStore(drizzlePg(pgClient));
      await pgClient.connect();
      await onClient.ping();
    } finally {
      await pgClient.end();
      await mysqlConnection.end();
    }
  });

  it('refuses anything else at construction, with the fix', () => {
    expect(() => new DrizzleIdempotencyStore({})).toThrow(IdempotencyConfigurationError);
    expect(() => new DrizzleIdempotencyStore({})).toThrow(/needs a Drizzle database.*drizzle-orm\/node-postgres/s);
    // A Drizzle database on a driver the store does not speak (drizzle's mock has no client).
    expect(() => new DrizzleIdempotencyStore(drizzlePg.mock())).toThrow(/does not support this Drizzle driver/);
    expect(() => new DrizzleIdempotencyStore(drizzlePg(new Client(pgPoolConfig())), { tableName: 'bad name' })).toThrow(
      /Invalid idempotency table name/,
    );
    expect(
      () => new DrizzleIdempotencyStore(drizzlePg(new Client(pgPoolConfig())), { isolationLevel: 'READ UNCOMMITTED' as never }),
    ).toThrow(/isolationLevel must be one of/);
  });

  it('says at boot that the tables are missing, naming the drizzle-kit route', async () => {
    const ledger = await pgLedger(2);
    try {
      const store = new DrizzleIdempotencyStore(ledger.db, { tableName: 'not_created' });
      const error = await store.verify().catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(IdempotencyConfigurationError);
      expect((error as Error).message).toMatch(/"not_created" does not exist.*idempotencyPgTables\('not_created'\).*drizzle-kit/s);
    } finally {
      await ledger.destroy();
    }
  });
});
