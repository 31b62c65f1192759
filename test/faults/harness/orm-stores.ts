/**
 * The Prisma (@prisma/adapter-pg) and Drizzle (node-postgres pool) stores of the fault
 * suites, on PostgreSQL through one fault proxy, a schema per run (the harness database's
 * tables, which every SQL store shares), each instance on a pool of its own. No store
 * option is set: the defaults must bound every answer and recover after the fault.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Pool, type PoolConfig } from 'pg';
import { DrizzleIdempotencyStore } from '../../../lib/drizzle/index.js';
import { PrismaIdempotencyStore, type PrismaClientLike } from '../../../lib/prisma/index.js';
import { HarnessDatabase } from '../../reliability/harness/postgres.js';
import { startFaultProxy, type FaultProxy } from '../../support/fault-proxy.js';
import { pgConnection } from '../../support/postgres.js';
import { generatedClientDir } from '../../prisma/support.js';
import type { FaultStore } from './stores.js';

const tag = () => `${process.pid}_${randomBytes(4).toString('hex')}`;

interface OrmFaultDatabase {
  readonly db: HarnessDatabase;
  readonly proxy: FaultProxy;
  poolConfig(): PoolConfig;
}

async function openDatabase(kind: string): Promise<OrmFaultDatabase> {
  const id = tag();
  const db = new HarnessDatabase(`faults_${kind}_${id}`, `idem-faults-${kind}-${id}`);
  await db.create();
  const proxy = await startFaultProxy({ host: pgConnection.host, port: pgConnection.port });
  return {
    db,
    proxy,
    poolConfig: () => ({
      host: proxy.address.host,
      port: proxy.address.port,
      user: pgConnection.username,
      password: pgConnection.password,
      database: pgConnection.database,
      max: 4,
      options: `-c search_path=${db.schema}`,
    }),
  };
}

/** Ends a pool some of whose connections a fault left dead: not awaited past 2 s. */
function endQuietly(end: () => Promise<unknown>): Promise<void> {
  return Promise.race([
    end().then(
      () => undefined,
      () => undefined,
    ),
    new Promise<void>((resolve) => setTimeout(resolve, 2_000).unref()),
  ]);
}

type PrismaClientClass = new (options: { adapter: unknown }) => PrismaClientLike & { $disconnect(): Promise<void> };

/** PrismaIdempotencyStore on a generated client, its adapter made on a pg Pool (`new PrismaPg(pool)`, as docs/prisma.md says). */
export async function prismaFaultStore(): Promise<FaultStore> {
  const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts')) as { PrismaClient: PrismaClientClass };
  const { db, proxy, poolConfig } = await openDatabase('pr');
  return {
    name: 'Prisma (adapter-pg)',
    proxies: [proxy],
    async openBackend() {
      const pool = new Pool(poolConfig());
      const prisma = new PrismaClient({ adapter: new PrismaPg(pool, { schema: db.schema }) });
      return { store: new PrismaIdempotencyStore(prisma), close: () => endQuietly(() => prisma.$disconnect().then(() => pool.end())) };
    },
    async dispose() {
      await proxy.stop();
      await db.drop();
    },
  };
}

/** DrizzleIdempotencyStore on drizzle-orm/node-postgres made on a pg Pool. */
export async function drizzleFaultStore(): Promise<FaultStore> {
  const { db, proxy, poolConfig } = await openDatabase('dz');
  return {
    name: 'Drizzle (node-postgres)',
    proxies: [proxy],
    async openBackend() {
      const pool = new Pool(poolConfig());
      pool.on('error', () => undefined);
      return { store: new DrizzleIdempotencyStore(drizzle(pool)), close: () => endQuietly(() => pool.end()) };
    },
    async dispose() {
      await proxy.stop();
      await db.drop();
    },
  };
}
