import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { MemoryIdempotencyStore, type IdempotencyStore } from '../../lib/index.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { pgConnection } from './postgres.js';

/** A store on a real backend, with what it takes to leave nothing behind. */
export interface StoreUnderTest {
  store: IdempotencyStore;
  dispose(): Promise<void>;
}

/** A name for `describe.each` and how to open the store. */
export type StoreFactory = [name: string, open: () => Promise<StoreUnderTest>];

/**
 * The memory store, `RedisIdempotencyStore` on 127.0.0.1:6379 (keys under a prefix of
 * their own, deleted by `dispose`) and `TypeOrmIdempotencyStore` on PostgreSQL (a schema
 * of its own, dropped by `dispose`): what suites run against when a behaviour must hold
 * through every store's serialized records. `tag` names the Redis prefix and the schema.
 */
export function realStores(tag: string, options: { pgExtra?: Record<string, unknown> } = {}): StoreFactory[] {
  return [
    ['memory', async () => ({ store: new MemoryIdempotencyStore(), dispose: async () => undefined })],
    [
      'Redis',
      async () => {
        const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
        await client.connect();
        const prefix = `test:${tag}:${randomUUID()}:`;
        return {
          store: new RedisIdempotencyStore(client, { prefix }),
          dispose: async () => {
            const keys = await client.keys(`${prefix}*`);
            if (keys.length > 0) await client.del(...keys);
            client.disconnect();
          },
        };
      },
    ],
    [
      'PostgreSQL (TypeOrmIdempotencyStore)',
      async () => {
        const { dataSource, dispose } = await pgSchema(tag, options.pgExtra);
        const store = new TypeOrmIdempotencyStore(dataSource);
        await store.ensureTable();
        return {
          store,
          dispose: async () => {
            await store.close();
            await dispose();
          },
        };
      },
    ],
  ];
}

/** A PostgreSQL DataSource on a schema of its own; `dispose` drops the schema with everything in it. */
export async function pgSchema(
  tag: string,
  extra?: Record<string, unknown>,
): Promise<{ dataSource: DataSource; dispose(): Promise<void> }> {
  const schema = `${tag}_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new DataSource({ ...pgConnection, poolSize: 1 });
  await admin.initialize();
  await admin.query(`CREATE SCHEMA "${schema}"`);
  await admin.destroy();
  const dataSource = new DataSource({ ...pgConnection, schema, poolSize: 4, ...(extra ? { extra } : {}) });
  await dataSource.initialize();
  return {
    dataSource,
    dispose: async () => {
      await dataSource.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await dataSource.destroy();
    },
  };
}
