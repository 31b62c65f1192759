/**
 * The SQL stores under test, each as an application wires it and each counting, at the
 * client, the statements it sends: the TypeORM store on PostgreSQL and on MariaDB (its
 * logged queries) with their floors on the same pool, Prisma (a generated client on
 * `@prisma/adapter-pg`) and Drizzle (on node-postgres) on the same PostgreSQL (node-postgres
 * `Pool#query` calls). The DataSource and the records table are bench/scale.ts's too.
 */
import { join } from 'node:path';
import type { Logger as TypeOrmLogger } from 'typeorm';
import type { IdempotencyStore } from '../lib/core/index.js';
import { DEFAULT_URLS } from './args.js';
import { CountingStore } from './counting-store.js';
import {
  createMariadbFloorTable,
  createPostgresFloorTable,
  mariadbFloor,
  postgresFloor,
  type FloorMysqlPool,
  type FloorPgPool,
} from './floors.js';
import { loadLibModule } from './lib.js';
import type { BenchStore, BenchStoreOptions } from './stores.js';

/** The table of a run's SQL store (and, with suffixes, of its floor and steps). */
function tableOf(options: BenchStoreOptions): string {
  return `bench_idempotency_${options.runId.replace(/[^a-z0-9_]/gi, '_')}`;
}

/**
 * A TypeORM DataSource on PostgreSQL or MariaDB (or MySQL), initialized, with one pool of
 * 20: more than the 16 callers of the scale run, fewer than the 50 connections of the
 * HTTP bench, as an application would size it.
 */
export async function openDataSource(
  kind: 'postgres' | 'mariadb',
  url: string,
  logger?: TypeOrmLogger,
): Promise<import('typeorm').DataSource> {
  const { DataSource } = require('typeorm') as typeof import('typeorm');
  const dataSource =
    kind === 'mariadb'
      ? new DataSource({ type: 'mariadb', url, logger, poolSize: 20 })
      : new DataSource({ type: 'postgres', url, logger, extra: { max: 20 } });
  return dataSource.initialize();
}

/** Creates (`up`) or drops (`down`) the records table and its steps table through the library's own migration, as an application does. */
export async function migrateRecordsTable(
  dataSource: import('typeorm').DataSource,
  table: string,
  direction: 'up' | 'down',
): Promise<void> {
  const { createIdempotencyRecordsMigration } = loadLibModule<typeof import('../lib/typeorm/index.js')>('typeorm/index.ts');
  const Migration = createIdempotencyRecordsMigration(table) as new () => import('typeorm').MigrationInterface;
  const runner = dataSource.createQueryRunner();
  try {
    await new Migration()[direction](runner);
  } finally {
    await runner.release();
  }
}

export async function openTypeOrm(options: BenchStoreOptions, name: 'typeorm' | 'mariadb'): Promise<BenchStore> {
  const { TypeOrmIdempotencyStore } = loadLibModule<typeof import('../lib/typeorm/index.js')>('typeorm/index.ts');
  let queries = 0;
  const ignore = () => undefined;
  const logger: TypeOrmLogger = {
    ...{ logQueryError: ignore, logQuerySlow: ignore, logSchemaBuild: ignore, logMigration: ignore, log: ignore },
    logQuery: () => void queries++,
  };
  const table = tableOf(options);
  const dataSource =
    name === 'mariadb'
      ? await openDataSource('mariadb', options.mariadbUrl ?? DEFAULT_URLS.mariadb, logger)
      : await openDataSource('postgres', options.postgresUrl ?? DEFAULT_URLS.postgres, logger);
  await migrateRecordsTable(dataSource, table, 'up');
  const store = new CountingStore(new TypeOrmIdempotencyStore(dataSource, { tableName: table }));
  // The floor runs on the pool the store's own statements run on (TypeORM's driver pool).
  const floorTable = `${table}_floor`;
  const driver = dataSource.driver as unknown as { master: FloorPgPool; pool: FloorMysqlPool };
  let floor: BenchStore['floor'];
  if (name === 'mariadb') {
    await createMariadbFloorTable(driver.pool, floorTable);
    floor = { name: 'floor-mariadb', backend: mariadbFloor(driver.pool, floorTable) };
  } else {
    await createPostgresFloorTable(driver.master, floorTable);
    floor = { name: 'floor-postgres', backend: postgresFloor(driver.master, floorTable) };
  }
  const before = queries;
  return {
    name,
    store,
    backendCalls: () => queries - before,
    floor,
    close: async () => {
      await migrateRecordsTable(dataSource, table, 'down').catch(ignore);
      await dataSource.query(`DROP TABLE IF EXISTS ${name === 'mariadb' ? `\`${floorTable}\`` : `"${floorTable}"`}`).catch(ignore);
      await dataSource.destroy();
    },
  };
}

/** A node-postgres pool whose `query` calls are counted (one per statement the store sends). */
function countedPool(options: BenchStoreOptions): { pool: import('pg').Pool; queries: () => number } {
  const { Pool } = require('pg') as typeof import('pg');
  // One pool of 20 for 50 concurrent requests, as the TypeORM store gets.
  const pool = new Pool({ connectionString: options.postgresUrl ?? DEFAULT_URLS.postgres, max: 20 });
  // An idle connection the server ends is reported here; without a listener the process exits.
  pool.on('error', () => undefined);
  let queries = 0;
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args) => {
    queries++;
    return query(...args);
  };
  return { pool, queries: () => queries };
}

/** Opens a SQL store on `pool`, creates its tables with `ensureTable()`, and drops them on close. */
async function sqlBenchStore(
  name: 'prisma' | 'drizzle',
  inner: IdempotencyStore & { ensureTable(): Promise<void>; close(): Promise<void> },
  counted: { pool: import('pg').Pool; queries: () => number },
  table: string,
  disconnect: () => Promise<void>,
): Promise<BenchStore> {
  try {
    await inner.ensureTable();
  } catch (error) {
    await disconnect().catch(() => undefined);
    throw error;
  }
  const before = counted.queries();
  return {
    name,
    store: new CountingStore(inner),
    backendCalls: () => counted.queries() - before,
    close: async () => {
      await inner.close();
      await counted.pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_steps"`).catch(() => undefined);
      await disconnect();
    },
  };
}

export async function openPrisma(options: BenchStoreOptions): Promise<BenchStore> {
  // The test suite's generated client (.tmp/prisma-test-clients/, offline `prisma generate`, generated once).
  const { generatedClientDir } = require('../test/prisma/support.js') as typeof import('../test/prisma/support.js');
  type Client = import('../lib/prisma/index.js').PrismaClientLike & { $disconnect(): Promise<void> };
  const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts')) as { PrismaClient: new (o: object) => Client };
  const { PrismaPg } = require('@prisma/adapter-pg') as typeof import('@prisma/adapter-pg');
  const { PrismaIdempotencyStore } = loadLibModule<typeof import('../lib/prisma/index.js')>('prisma/index.ts');
  const counted = countedPool(options);
  const prisma = new PrismaClient({ adapter: new PrismaPg(counted.pool) });
  const table = tableOf(options);
  const disconnect = async () => {
    await prisma.$disconnect();
    await counted.pool.end().catch(() => undefined);
  };
  return sqlBenchStore('prisma', new PrismaIdempotencyStore(prisma, { tableName: table }), counted, table, disconnect);
}

export async function openDrizzle(options: BenchStoreOptions): Promise<BenchStore> {
  const { drizzle } = require('drizzle-orm/node-postgres') as typeof import('drizzle-orm/node-postgres');
  const { DrizzleIdempotencyStore } = loadLibModule<typeof import('../lib/drizzle/index.js')>('drizzle/index.ts');
  const counted = countedPool(options);
  const table = tableOf(options);
  // Prepared statements: the store's default, as the TypeORM store prepares its own.
  const store = new DrizzleIdempotencyStore(drizzle(counted.pool), { tableName: table });
  return sqlBenchStore('drizzle', store, counted, table, () => counted.pool.end());
}
