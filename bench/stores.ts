import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { CountingStore } from './counting-store.js';
import { memoryFloor, redisFloor, type FloorBackend, type FloorName } from './floors.js';
import { DEFAULT_URLS } from './args.js';
import { deleteByPrefix } from './harness.js';
import { LIB_DIR, loadLib, loadLibModule } from './lib.js';
import { openDrizzle, openPrisma, openTypeOrm } from './sql-stores.js';

/** The stores the bench knows (`ALL_STORES` says what each is). */
export type StoreName = 'memory' | 'redis' | 'redisNear' | 'typeorm' | 'mariadb' | 'prisma' | 'drizzle' | 'node-redis';

/**
 * Where a run's stores connect (`DEFAULT_URLS` where unset); ioredis `enableAutoPipelining`
 * (off: ioredis's default); `runId`, the prefix of the run's Redis keys and the suffix of
 * its tables, unique per bench process.
 */
export interface BenchStoreOptions {
  redisUrl?: string;
  postgresUrl?: string;
  mariadbUrl?: string;
  autoPipelining?: boolean;
  runId: string;
}

/** A store under test, its call counter and what its backend saw (commands, queries). */
export interface BenchStore {
  name: StoreName;
  store: CountingStore;
  /** Commands or queries the backend client sent, counted at the client. */
  backendCalls(): number;
  /** The store path done by hand on the same client or pool (bench/floors.ts), for the stores that have one. */
  floor?: { name: FloorName; backend: FloorBackend };
  close(): Promise<void>;
}

/**
 * `redisNear`: the Redis store with its near cache on (same Redis, own prefix);
 * `typeorm`: the TypeORM store on PostgreSQL; `mariadb`: the same store on MariaDB (or MySQL);
 * `prisma`, `drizzle`: their stores on the same PostgreSQL; `node-redis`: the Redis store on
 * a node-redis client. Each counts, at the client, what it sends: EVAL / EVALSHA on Redis,
 * TypeORM's logged queries, node-postgres `Pool#query` calls for Prisma (its adapter) and Drizzle.
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

export function openStore(name: StoreName, options: BenchStoreOptions): Promise<BenchStore> {
  return OPENERS[name](options);
}

const OPENERS: Record<StoreName, (options: BenchStoreOptions) => Promise<BenchStore>> = {
  memory: async () => {
    // The store's default bound (10 000): the replay key is stored just before its run, so eviction never removes it.
    const store = new CountingStore(new (loadLib().MemoryIdempotencyStore)());
    return {
      name: 'memory',
      store,
      backendCalls: () => store.counts.claim + store.counts.complete + store.counts.release + store.counts.renew,
      floor: { name: 'floor-memory', backend: memoryFloor() },
      close: async () => {},
    };
  },
  redis: (options) => openRedis(options, false),
  redisNear: (options) => openRedis(options, true),
  typeorm: (options) => openTypeOrm(options, 'typeorm'),
  mariadb: (options) => openTypeOrm(options, 'mariadb'),
  prisma: openPrisma,
  drizzle: openDrizzle,
  'node-redis': openNodeRedis,
};

async function openRedis(options: BenchStoreOptions, near: boolean): Promise<BenchStore> {
  const { Redis } = await import('ioredis');
  const { RedisIdempotencyStore, recommendedRedisOptions } = loadLibModule<typeof import('../lib/redis/index.js')>('redis/index.ts');
  const client = new Redis(options.redisUrl ?? DEFAULT_URLS.redis, {
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

async function openNodeRedis(options: BenchStoreOptions): Promise<BenchStore> {
  const { createClient } = require('redis') as typeof import('redis');
  const { RedisIdempotencyStore, recommendedNodeRedisOptions } = loadLibModule<typeof import('../lib/redis/index.js')>('redis/index.ts');
  const client = createClient({ url: options.redisUrl ?? DEFAULT_URLS.redis, ...recommendedNodeRedisOptions() });
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
