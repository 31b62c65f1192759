/**
 * node-postgres reports a connection the server ended (`pg_terminate_backend`) as an
 * 'error' event: on the pool for an idle client, on the client while it is checked out.
 * Unhandled, it kills the process (here: an uncaught exception, which fails the test). The
 * SQL stores on PostgreSQL guard every pool they reach, so the application survives and the
 * next request is served: Drizzle on a pool of the app's without an 'error' listener, Prisma
 * on a pg Pool given to `PrismaPg` or on one the adapter builds from a configuration (where
 * `@prisma/adapter-pg` holds a freshly checked-out client without a listener until an
 * `await` later: the invariant harness's crash), TypeORM (its own pool listener, and the
 * store's client guard). Deterministic: each test waits for the pool or client to have
 * handled the termination (its client removed, its 'end'), never for a time.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Pool, type PoolClient, type PoolConfig } from 'pg';
import { DrizzleIdempotencyStore } from '../../lib/drizzle/index.js';
import { PrismaIdempotencyStore, type PrismaClientLike } from '../../lib/prisma/index.js';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { generatedClientDir } from '../prisma/support.js';
import { pgConnection } from '../support/postgres.js';
import { harnessDataSource, HarnessDatabase } from './harness/postgres.js';
import { waitFor } from './harness/scenario.js';

type PrismaClientClass = new (options: { adapter: unknown }) => PrismaClientLike & { $disconnect(): Promise<void> };

interface Store {
  get(key: string): Promise<unknown>;
}

describe('SQL stores on PostgreSQL: a terminated pooled connection never kills the process', () => {
  const id = randomBytes(4).toString('hex');
  const db = new HarnessDatabase(`pgerr_${process.pid}_${id}`, `idem-pgerr-${id}`);
  const admin = new Pool({
    host: pgConnection.host,
    port: pgConnection.port,
    user: pgConnection.username,
    database: pgConnection.database,
    max: 1,
  });
  admin.on('error', () => undefined);
  const cleanups: Array<() => Promise<unknown>> = [];
  let n = 0;

  beforeAll(async () => {
    await db.create();
  }, 30_000);
  afterEach(async () => {
    await Promise.all(cleanups.splice(0).map((cleanup) => cleanup().catch(() => undefined)));
  });
  afterAll(async () => {
    await admin.end();
    await db.drop();
  }, 30_000);

  /** Pool settings of one test: the run's schema, an application_name of its own (what the test terminates). */
  function poolConfig(): PoolConfig & { application_name: string } {
    return {
      host: pgConnection.host,
      port: pgConnection.port,
      user: pgConnection.username,
      database: pgConnection.database,
      max: 3,
      application_name: `${db.applicationName}-${++n}`,
      options: `-c search_path=${db.schema}`,
    };
  }

  async function terminate(applicationName: string): Promise<number> {
    const { rows } = await admin.query<{ terminated: boolean }>(
      'SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity WHERE application_name = $1',
      [applicationName],
    );
    return rows.filter((row) => row.terminated).length;
  }

  /** Opens `count` connections at once and leaves them idle in the pool. */
  async function idleConnections(pool: Pool, count: number): Promise<void> {
    const clients = await Promise.all(Array.from({ length: count }, () => pool.connect()));
    clients.forEach((client) => client.release());
    expect(pool.idleCount).toBe(count);
  }

  /** Terminates the backends of a pool's idle connections; resolves once the pool dropped every one of them. */
  async function terminateIdle(pool: Pool, applicationName: string): Promise<void> {
    await idleConnections(pool, 3);
    expect(await terminate(applicationName)).toBe(3);
    await waitFor(() => pool.totalCount === 0, 5_000, 'the pool to drop its terminated idle connections');
  }

  /**
   * Checks a connection out as `@prisma/adapter-pg` does for a transaction (`await pool.connect()`)
   * and, before any listener of the holder's, has its backend terminated; resolves once the client ended.
   */
  async function terminateCheckedOut(pool: Pool, applicationName: string): Promise<void> {
    const client: PoolClient = await pool.connect();
    const ended = new Promise((resolve) => client.once('end', resolve));
    expect(await terminate(applicationName)).toBe(1);
    await ended;
    client.release(true);
  }

  function prismaOn(adapter: PrismaPg): PrismaClientLike & { $disconnect(): Promise<void> } {
    const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts')) as { PrismaClient: PrismaClientClass };
    const prisma = new PrismaClient({ adapter });
    cleanups.push(() => prisma.$disconnect());
    return prisma;
  }

  async function served(store: Store): Promise<void> {
    await expect(store.get(`after-${randomBytes(4).toString('hex')}`)).resolves.toBeUndefined();
  }

  it('Drizzle on a pool without an error listener: idle connections terminated, the next request served', async () => {
    const config = poolConfig();
    const pool = new Pool(config);
    cleanups.push(() => pool.end());
    const store = new DrizzleIdempotencyStore(drizzle(pool));
    await served(store);
    // Before: pg-pool emitted 'error' on a pool nobody listened to (the process died).
    await terminateIdle(pool, config.application_name);
    await served(store);
  });

  it('Prisma on a pg Pool (new PrismaPg(pool)): a checked-out connection and idle ones terminated, the next request served', async () => {
    const config = poolConfig();
    const pool = new Pool(config);
    cleanups.push(() => pool.end());
    const store = new PrismaIdempotencyStore(prismaOn(new PrismaPg(pool, { schema: db.schema })));
    await served(store);
    // Before: the checked-out client had no listener until its holder attached one (the process died).
    await terminateCheckedOut(pool, config.application_name);
    await terminateIdle(pool, config.application_name);
    await served(store);
  });

  it('Prisma on a configuration (the adapter builds its pool): a checked-out connection terminated, the next request served', async () => {
    const config = poolConfig();
    const adapter = new PrismaPg(config, { schema: db.schema });
    // The pool the adapter builds when Prisma connects, seen the way the store reaches it.
    let pool: Pool | undefined;
    const connect = adapter.connect.bind(adapter);
    adapter.connect = async () => {
      const connected = await connect();
      pool = connected.underlyingDriver() as Pool;
      return connected;
    };
    const store = new PrismaIdempotencyStore(prismaOn(adapter));
    await served(store);
    expect(pool).toBeDefined();
    await terminateCheckedOut(pool!, config.application_name);
    await terminateIdle(pool!, config.application_name);
    await served(store);
  });

  it('TypeORM: idle connections and a checked-out one terminated, the next request served', async () => {
    const config = poolConfig();
    const dataSource = harnessDataSource(db.schema, config.application_name, 3);
    await dataSource.initialize();
    cleanups.push(() => dataSource.destroy());
    const store = new TypeOrmIdempotencyStore(dataSource);
    await served(store);
    const pool = (dataSource.driver as unknown as { master: Pool }).master;
    await terminateCheckedOut(pool, config.application_name);
    await terminateIdle(pool, config.application_name);
    await served(store);
  });
});
