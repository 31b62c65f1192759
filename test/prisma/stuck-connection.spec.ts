import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PrismaIdempotencyStore, type PrismaClientLike } from '../../lib/prisma/index.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { pgConnection } from '../support/postgres.js';
import { generatedClientDir, uniqueName } from './support.js';

/**
 * A connection a dead path holds (issue 42): with the adapter made on a pg Pool
 * (`new PrismaPg(pool)`), the store destroys the connection its statement was stuck on
 * (before: the pool kept handing it out, 503 for good); on an adapter made on a
 * configuration the store cannot reach the pool, and its 503 says the connection was
 * left to the driver (before: it said discarded).
 */
type PrismaClientClass = new (options: { adapter: unknown }) => PrismaClientLike & { $disconnect(): Promise<void> };
const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts')) as { PrismaClient: PrismaClientClass };

const STATEMENT_TIMEOUT = 400;

describe('PrismaIdempotencyStore on PostgreSQL: a connection stuck on a dead path', () => {
  let proxy: FaultProxy;
  const schema = uniqueName('prisma_stuck');
  const closers: (() => Promise<unknown>)[] = [];
  const config = () => ({
    host: '127.0.0.1',
    port: proxy.port,
    user: pgConnection.username,
    password: pgConnection.password,
    database: pgConnection.database,
    max: 1,
    options: `-c search_path=${schema}`,
  });

  beforeAll(async () => {
    const admin = new Pool({
      host: pgConnection.host,
      port: pgConnection.port,
      user: pgConnection.username,
      database: pgConnection.database,
      max: 1,
    });
    await admin.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    await admin.end();
  });
  beforeEach(async () => {
    proxy = await startFaultProxy({ host: pgConnection.host, port: pgConnection.port });
  });
  afterEach(async () => {
    for (const close of closers.splice(0)) await close().catch(() => undefined);
    await proxy.stop();
  });
  afterAll(async () => {
    const admin = new Pool({
      host: pgConnection.host,
      port: pgConnection.port,
      user: pgConnection.username,
      database: pgConnection.database,
      max: 1,
    });
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  async function storeOn(adapter: unknown) {
    const prisma = new PrismaClient({ adapter });
    closers.push(() => Promise.race([prisma.$disconnect(), new Promise((resolve) => setTimeout(resolve, 1_000))]));
    const store = new PrismaIdempotencyStore(prisma, { statementTimeout: STATEMENT_TIMEOUT });
    await store.ensureTable();
    expect((await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
    return store;
  }

  it('on a pg Pool: the stuck connection is destroyed, and a new key is served within 5 s of the heal', async () => {
    const pool = new Pool(config());
    pool.on('error', () => undefined);
    closers.push(() => Promise.race([pool.end(), new Promise((resolve) => setTimeout(resolve, 1_000))]));
    const store = await storeOn(new PrismaPg(pool, { schema }));
    proxy.blackhole();
    const stuck = await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 }).catch((error: unknown) => error);
    expect(stuck).toMatchObject({ name: 'StatementDeadlineError', code: 'ETIMEDOUT' });
    expect(String((stuck as Error).message)).toMatch(/its connection was discarded/);
    await proxy.heal();
    const healedAt = Date.now();
    let claimed = false;
    while (!claimed && Date.now() - healedAt < 5_000) {
      claimed = await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 }).then(
        (result) => result.claimed,
        () => false,
      );
    }
    expect(claimed).toBe(true);
  }, 20_000);

  it('on an adapter made on a configuration: the 503 says the connection was left to the driver', async () => {
    const store = await storeOn(new PrismaPg(config(), { schema }));
    proxy.blackhole();
    const stuck = await store.claim(randomUUID(), { token: 't', leaseTtl: 10_000 }).catch((error: unknown) => error);
    expect(stuck).toMatchObject({ name: 'StatementDeadlineError', code: 'ETIMEDOUT' });
    expect(String((stuck as Error).message)).toMatch(/its connection was left to the driver/);
  }, 20_000);
});
