import type { IdempotencyStore } from '../lib/core/index.js';
import { CountingStore } from './counting-store.js';
import { loadLibModule } from './lib.js';
import type { BenchStore, BenchStoreOptions } from './store-types.js';

/**
 * The stores of issue 30 as an application wires them: Prisma (a generated client on
 * `@prisma/adapter-pg`) and Drizzle (drizzle-orm on node-postgres) on the PostgreSQL of the
 * TypeORM store, and the Redis store on a node-redis client. Each counts, at the client,
 * what it sends: node-postgres `Pool#query` calls for the SQL stores (the Prisma adapter and
 * Drizzle both send a store statement through it), `EVAL` / `EVALSHA` for node-redis.
 */

/** One pool of 20 for 50 concurrent requests, as the TypeORM store gets. */
const POOL_SIZE = 20;

function tableOf(options: BenchStoreOptions): string {
  return `bench_idempotency_${options.runId.replace(/[^a-z0-9_]/gi, '_')}`;
}

/** A node-postgres pool whose `query` calls are counted (one per statement the store sends). */
function countedPool(options: BenchStoreOptions): { pool: import('pg').Pool; queries: () => number } {
  const { Pool } = require('pg') as typeof import('pg');
  const pool = new Pool({ connectionString: options.postgresUrl ?? 'postgres://postgres@127.0.0.1:5432/test', max: POOL_SIZE });
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
  const { join } = require('node:path') as typeof import('node:path');
  const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts')) as {
    PrismaClient: new (options: {
      adapter: unknown;
    }) => import('../lib/prisma/index.js').PrismaClientLike & { $disconnect(): Promise<void> };
  };
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

export async function openNodeRedis(options: BenchStoreOptions): Promise<BenchStore> {
  const { createClient } = require('redis') as typeof import('redis');
  const { RedisIdempotencyStore, recommendedNodeRedisOptions } = loadLibModule<typeof import('../lib/redis/index.js')>('redis/index.ts');
  const client = createClient({ url: options.redisUrl ?? 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() });
  // Errors surface through the commands (and fail the run).
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    client.destroy();
    throw error;
  }
  let commands = 0;
  // The same shape the store reads from a node-redis client, with EVAL / EVALSHA counted.
  const counted = {
    get isOpen() {
      return client.isOpen;
    },
    get isReady() {
      return client.isReady;
    },
    options: client.options,
    connect: () => client.connect(),
    eval: (script: string, o?: { keys?: string[]; arguments?: string[] }) => {
      commands++;
      return client.eval(script, o);
    },
    evalSha: (sha: string, o?: { keys?: string[]; arguments?: string[] }) => {
      commands++;
      return client.evalSha(sha, o);
    },
    ping: () => client.ping(),
    on: (event: string, listener: (...args: unknown[]) => void) => client.on(event, listener),
    removeListener: (event: string, listener: (...args: unknown[]) => void) => client.removeListener(event, listener),
  };
  const prefix = `bench:${options.runId}:node-redis:`;
  const store = new RedisIdempotencyStore(counted as never, { prefix });
  return {
    name: 'node-redis',
    store: new CountingStore(store),
    backendCalls: () => commands,
    close: async () => {
      await store.close?.();
      for await (const keys of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
        const batch = ([] as string[]).concat(keys as string | string[]);
        if (batch.length) await client.unlink(batch);
      }
      client.destroy();
    },
  };
}
