import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { IdempotencyStore } from '../lib/core/index.js';
import type { Logger as TypeOrmLogger } from 'typeorm';
import { CountingStore } from './counting-store.js';
import {
  createMariadbFloorTable,
  createPostgresFloorTable,
  mariadbFloor,
  memoryFloor,
  postgresFloor,
  redisFloor,
  type FloorMysqlPool,
  type FloorName,
  type FloorPgPool,
} from './floors.js';
import { LIB_DIR, loadLib, loadLibModule } from './lib.js';
import { openDrizzle, openNodeRedis, openPrisma } from './orm-stores.js';
import type { BenchStore, BenchStoreOptions, StoreName } from './store-types.js';
import { deleteByPrefix } from './harness.js';

export type { BenchStore, BenchStoreOptions, StoreName } from './store-types.js';

/**
 * `redisNear`: the Redis store with its near cache on (same Redis, own prefix);
 * `typeorm`: the TypeORM store on PostgreSQL; `mariadb`: the same store on MariaDB (or MySQL);
 * `prisma`, `drizzle`: their stores on the same PostgreSQL; `node-redis`: the Redis store on
 * a node-redis client (bench/orm-stores.ts).
 */
export const ALL_STORES: readonly StoreName[] = ['memory', 'redis', 'redisNear', 'typeorm', 'mariadb', 'prisma', 'drizzle', 'node-redis'];

/** The floor each library store is measured against (the same kind of client or pool, the same database). */
export const FLOOR_OF: Record<StoreName, FloorName> = {
  memory: 'floor-memory',
  redis: 'floor-redis',
  redisNear: 'floor-redis',
  'node-redis': 'floor-redis',
  typeorm: 'floor-postgres',
  prisma: 'floor-postgres',
  drizzle: 'floor-postgres',
  mariadb: 'floor-mariadb',
};

/**
 * True when the lib under test (this tree's, or BENCH_LIB's) has the store's entry
 * point. Checked by path, not loaded: loading it would pull in ioredis or typeorm
 * where only the flags are parsed.
 */
export function storeModuleReady(name: StoreName): boolean {
  if (name === 'redisNear') return existsSync(join(LIB_DIR, 'redis', 'near-cache.ts'));
  if (name === 'node-redis') return existsSync(join(LIB_DIR, 'redis', 'node-redis-client.ts'));
  return name === 'memory' || existsSync(join(LIB_DIR, name === 'mariadb' ? 'typeorm' : name, 'index.ts'));
}

/** Opens the stores that can be opened; a store whose server is down is left out with a message on stderr. */
export async function openStores(names: readonly StoreName[], options: BenchStoreOptions): Promise<BenchStore[]> {
  const stores: BenchStore[] = [];
  for (const name of names) {
    try {
      stores.push(await openStore(name, options));
    } catch (error) {
      process.stderr.write(
        `bench: leaving out the ${name} store, it did not open: ${error instanceof Error ? error.message : String(error)}\n`,
      );
    }
  }
  return stores;
}

export async function openStore(name: StoreName, options: BenchStoreOptions): Promise<BenchStore> {
  switch (name) {
    case 'memory': {
      // The store's default bound (10 000): the replay key is stored just before its run, so eviction never removes it.
      const store = new CountingStore(new (loadLib().MemoryIdempotencyStore)());
      return {
        name,
        store,
        backendCalls: () => store.counts.claim + store.counts.complete + store.counts.release + store.counts.renew,
        floor: { name: 'floor-memory', backend: memoryFloor() },
        close: async () => {},
      };
    }
    case 'redis':
      return openRedis(options, false);
    case 'redisNear':
      return openRedis(options, true);
    case 'typeorm':
      return openTypeOrm(options, 'typeorm');
    case 'mariadb':
      return openTypeOrm(options, 'mariadb');
    case 'prisma':
      return openPrisma(options);
    case 'drizzle':
      return openDrizzle(options);
    case 'node-redis':
      return openNodeRedis(options);
  }
}

async function openRedis(options: BenchStoreOptions, near: boolean): Promise<BenchStore> {
  const { Redis } = await import('ioredis');
  const { RedisIdempotencyStore, recommendedRedisOptions } = loadLibModule<typeof import('../lib/redis/index.js')>('redis/index.ts');
  const client = new Redis(options.redisUrl ?? 'redis://127.0.0.1:6379', {
    ...recommendedRedisOptions(),
    enableAutoPipelining: options.autoPipelining ?? false,
    lazyConnect: true,
  });
  // Errors surface through the commands (and fail the run); no "Unhandled error event" noise.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw error;
  }
  let commands = 0;
  // Counts what the store sends, at the client: one EVAL/EVALSHA is one round trip.
  const counted = {
    eval: (...args: Parameters<typeof client.eval>) => {
      commands++;
      return client.eval(...args);
    },
    evalsha: (...args: Parameters<typeof client.evalsha>) => {
      commands++;
      return client.evalsha(...args);
    },
    ping: () => client.ping(),
    // The near cache opens its own tracking connection from the client's settings, and
    // (its 'client' mode) sends CLIENT TRACKING / CACHING / TRACKINGINFO on this client's
    // connection and follows its reconnections. A CACHING travels with the claim it goes
    // before (one round trip), so only the scripts are counted.
    ...(near
      ? {
          duplicate: (override?: object) => client.duplicate(override),
          options: client.options,
          call: (...args: Parameters<typeof client.call>) => client.call(...args),
          on: (event: string, listener: (...args: unknown[]) => void) => client.on(event, listener),
          removeListener: (event: string, listener: (...args: unknown[]) => void) => client.removeListener(event, listener),
          get status() {
            return client.status;
          },
        }
      : {}),
  };
  const base = `bench:${options.runId}:`;
  const redisStore = new RedisIdempotencyStore(counted as never, near ? { prefix: `${base}near:`, nearCache: true } : { prefix: base });
  const close = async () => {
    await redisStore.close?.();
    // The run's keys: the store's, the floor's, the near cache's (and the peer's, in bench/peers/app.ts).
    await deleteByPrefix(client, base);
    await client.quit();
  };
  if (near) {
    // Measured once the cache answers (its tracking is proven), not while it is still switching on.
    await redisStore.verify?.();
    const deadline = Date.now() + 5_000;
    while (!redisStore.nearCacheStats?.()?.enabled) {
      if (Date.now() > deadline) {
        await close();
        throw new Error('the near cache did not switch on within 5 s');
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    if (process.env.BENCH_NEAR_MODE && redisStore.nearCacheStats?.()?.tracking !== process.env.BENCH_NEAR_MODE) {
      await close();
      throw new Error(`the near cache tracks in ${redisStore.nearCacheStats?.()?.tracking} mode, not ${process.env.BENCH_NEAR_MODE}`);
    }
  }
  return {
    name: near ? 'redisNear' : 'redis',
    store: new CountingStore(redisStore),
    backendCalls: () => commands,
    // The floor of both Redis variants, on the plain store's client.
    ...(near ? {} : { floor: { name: 'floor-redis' as const, backend: redisFloor(client, `${base}floor:`) } }),
    close,
  };
}

async function openTypeOrm(options: BenchStoreOptions, name: 'typeorm' | 'mariadb'): Promise<BenchStore> {
  const typeorm = require('typeorm') as typeof import('typeorm');
  const lib = loadLibModule<Record<string, any>>('typeorm/index.ts');
  let queries = 0;
  class CountingLogger implements TypeOrmLogger {
    logQuery(): void {
      queries++;
    }
    logQueryError(): void {}
    logQuerySlow(): void {}
    logSchemaBuild(): void {}
    logMigration(): void {}
    log(): void {}
  }
  const table = `bench_idempotency_${options.runId.replace(/[^a-z0-9_]/gi, '_')}`;
  // One pool of 20 for 50 concurrent requests, as an application would size it.
  const dataSource =
    name === 'mariadb'
      ? new typeorm.DataSource({
          type: 'mariadb',
          url: options.mariadbUrl ?? 'mysql://root@127.0.0.1:3306/test',
          logger: new CountingLogger(),
          poolSize: 20,
        })
      : new typeorm.DataSource({
          type: 'postgres',
          url: options.postgresUrl ?? 'postgres://postgres@127.0.0.1:5432/test',
          logger: new CountingLogger(),
          extra: { max: 20 },
        });
  await dataSource.initialize();
  await createTable(lib, dataSource, table);
  const inner = new lib.TypeOrmIdempotencyStore(dataSource, { tableName: table }) as IdempotencyStore;
  const store = new CountingStore(inner);
  // The floor runs on the pool the store's own statements run on (TypeORM's driver pool).
  const floorTable = `${table}_floor`;
  const driver = dataSource.driver as unknown as { master?: FloorPgPool; pool?: FloorMysqlPool };
  let floor: BenchStore['floor'];
  if (name === 'mariadb') {
    await createMariadbFloorTable(driver.pool!, floorTable);
    floor = { name: 'floor-mariadb', backend: mariadbFloor(driver.pool!, floorTable) };
  } else {
    await createPostgresFloorTable(driver.master!, floorTable);
    floor = { name: 'floor-postgres', backend: postgresFloor(driver.master!, floorTable) };
  }
  const before = queries;
  const quote = (t: string) => (name === 'mariadb' ? `\`${t}\`` : `"${t}"`);
  return {
    name,
    store,
    backendCalls: () => queries - before,
    floor,
    close: async () => {
      for (const t of [table, floorTable]) await dataSource.query(`DROP TABLE IF EXISTS ${quote(t)}`).catch(() => undefined);
      await dataSource.destroy();
    },
  };
}

/** Creates the records table through the store's own migration, as an application would. */
async function createTable(lib: Record<string, any>, dataSource: import('typeorm').DataSource, table: string): Promise<void> {
  const Migration = lib.createIdempotencyRecordsMigration(table) as new () => import('typeorm').MigrationInterface;
  const runner = dataSource.createQueryRunner();
  try {
    await new Migration().up(runner);
  } finally {
    await runner.release();
  }
}
