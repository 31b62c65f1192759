/**
 * The stores of the fault suites, each reached through fault proxies: the shared Redis
 * (a prefix per run), a Redis Cluster of the suite's own (one proxy per node, the nodes'
 * announced addresses mapped onto the proxies with ioredis `natMap`), PostgreSQL (a schema
 * per run) and MariaDB (a database per run) through `TypeOrmIdempotencyStore`. Set-up and
 * effect reads use direct connections, never the faulty path.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { ServiceUnavailableException } from '@nestjs/common';
import { Cluster, Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { RedisIdempotencyStore, recommendedRedisClusterOptions, recommendedRedisOptions } from '../../../lib/redis/index.js';
import { getIdempotentEntityManager, TypeOrmIdempotencyStore, type TypeOrmIdempotencyStoreOptions } from '../../../lib/typeorm/index.js';
import type { Effect } from '../../reliability/harness/invariant.js';
import { HarnessMariaDatabase } from '../../reliability/harness/mariadb.js';
import { EFFECTS_TABLE, HarnessDatabase } from '../../reliability/harness/postgres.js';
import { startFaultProxy, type FaultProxy } from '../../support/fault-proxy.js';
import { mariadbConnection } from '../../support/mariadb.js';
import { pgConnection } from '../../support/postgres.js';
import { startRedisCluster } from '../../support/redis-servers.js';
import type { FaultBackend } from './app.js';

/** What one run may change in its instances' client settings (Redis stores only). */
export interface FaultBackendOptions {
  /** The client's `commandTimeout`, ms. @default 1000 (`recommendedRedisOptions()`'s own) */
  readonly commandTimeout?: number;
  /** The store's own bound of a call (`RedisIdempotencyStore`'s `timeout`), ms. @default 2000 (the store's default) */
  readonly storeTimeout?: number;
}

/** A store behind its faulty paths. */
export interface FaultStore {
  readonly name: string;
  /** Every path from the application to the store (one per Redis Cluster node). */
  readonly proxies: FaultProxy[];
  /** The store of one application instance, on connections of its own. */
  openBackend(options?: FaultBackendOptions): Promise<FaultBackend>;
  /** Effects committed in the database (transactional mode). */
  readonly readEffects?: () => Promise<Effect[]>;
  dispose(): Promise<void>;
}

const tag = () => `${process.pid}_${randomBytes(4).toString('hex')}`;

/** The shared Redis (6379) through one proxy, `recommendedRedisOptions()` as documented. */
export async function redisFaultStore(): Promise<FaultStore> {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: 6379 });
  const prefix = `faults:${tag()}:`;
  const clients: Redis[] = [];
  return {
    name: 'Redis',
    proxies: [proxy],
    async openBackend({ storeTimeout, ...clientOptions }: FaultBackendOptions = {}) {
      const client = new Redis({ ...proxy.address, lazyConnect: true, ...recommendedRedisOptions(clientOptions) });
      client.on('error', () => undefined);
      clients.push(client);
      return { store: new RedisIdempotencyStore(client, { prefix, timeout: storeTimeout }), close: async () => void client.disconnect() };
    },
    async dispose() {
      await proxy.stop();
      const admin = new Redis({ host: '127.0.0.1', port: 6379 });
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    },
  };
}

/** A Redis Cluster of 3 masters, one proxy per node, `recommendedRedisClusterOptions()`. */
export async function redisClusterFaultStore(): Promise<FaultStore> {
  const cluster = await startRedisCluster({ masters: 3 });
  const proxies = await Promise.all(cluster.nodes.map((node) => startFaultProxy(node)));
  // The nodes announce their own addresses (CLUSTER SLOTS, MOVED): the client maps each onto its proxy.
  const natMap = Object.fromEntries(cluster.nodes.map((node, i) => [`${node.host}:${node.port}`, proxies[i].address]));
  const prefix = `{faults}:${tag()}:`;
  return {
    name: 'Redis Cluster',
    proxies,
    async openBackend({ storeTimeout, ...clientOptions }: FaultBackendOptions = {}) {
      const client = new Cluster(
        proxies.map((proxy) => proxy.address),
        { ...recommendedRedisClusterOptions(clientOptions), natMap, lazyConnect: true },
      );
      client.on('error', () => undefined);
      return { store: new RedisIdempotencyStore(client, { prefix, timeout: storeTimeout }), close: async () => void client.disconnect() };
    },
    async dispose() {
      await Promise.all(proxies.map((proxy) => proxy.stop()));
      await cluster.stop();
    },
  };
}

export interface SqlFaultStoreOptions {
  readonly transactional?: boolean;
  /** Options of every instance's TypeOrmIdempotencyStore. @default {} (the defaults) */
  readonly storeOptions?: TypeOrmIdempotencyStoreOptions;
  /** Connections per instance. @default 4 */
  readonly poolSize?: number;
}

/** The effect row, written in the idempotent transaction (a failure of it is the app's 503, like a real app's). */
function transactionalEffect(sql: string) {
  return async (effect: Effect) => {
    await getIdempotentEntityManager()
      .query(sql, [effect.key, effect.effectId, effect.app, effect.pid])
      .catch((error: unknown) => {
        throw new ServiceUnavailableException(`database unavailable: ${(error as Error).message}`);
      });
  };
}

/** PostgreSQL through one proxy, a schema per run. */
export async function postgresFaultStore(options: SqlFaultStoreOptions = {}): Promise<FaultStore> {
  const id = tag();
  const db = new HarnessDatabase(`faults_${id}`, `idem-faults-${id}`);
  await db.create();
  const proxy = await startFaultProxy({ host: pgConnection.host, port: pgConnection.port });
  const insert = `INSERT INTO "${db.schema}".${EFFECTS_TABLE} (key, effect_id, app, pid) VALUES ($1, $2, $3, $4)`;
  return {
    name: 'PostgreSQL',
    proxies: [proxy],
    async openBackend() {
      // A transaction whose connection a dead path holds stays open on the server, with its
      // locks, until the server ends the session: idle_in_transaction_session_timeout, as
      // docs/reliability.md recommends for the transactional mode (issue 42).
      const extra = options.transactional ? { options: '-c idle_in_transaction_session_timeout=2000' } : undefined;
      const dataSource = new DataSource({ ...pgConnection, ...proxy.address, schema: db.schema, poolSize: options.poolSize ?? 4, extra });
      await dataSource.initialize();
      return {
        store: new TypeOrmIdempotencyStore(dataSource, options.storeOptions),
        recordEffect: transactionalEffect(insert),
        close: () => destroyQuietly(dataSource),
      };
    },
    readEffects: options.transactional ? () => db.readEffects() : undefined,
    async dispose() {
      await proxy.stop();
      await db.drop();
    },
  };
}

/** MariaDB through one proxy, a database per run. */
export async function mariadbFaultStore(options: SqlFaultStoreOptions = {}): Promise<FaultStore> {
  const db = new HarnessMariaDatabase(`faults_${tag()}`);
  await db.create();
  const proxy = await startFaultProxy({ host: mariadbConnection.host, port: mariadbConnection.port });
  const insert = `INSERT INTO \`${db.database}\`.${EFFECTS_TABLE} (\`key\`, effect_id, app, pid) VALUES (?, ?, ?, ?)`;
  return {
    name: 'MariaDB',
    proxies: [proxy],
    async openBackend() {
      // MariaDB's counterpart of PostgreSQL's idle_in_transaction_session_timeout (see
      // postgresFaultStore), set on each connection the pool opens, the first included.
      const driver = options.transactional ? mysql2EndingIdleTransactions() : undefined;
      const dataSource = new DataSource({
        ...mariadbConnection,
        ...proxy.address,
        database: db.database,
        poolSize: options.poolSize ?? 4,
        ...(driver ? { driver } : {}),
      });
      await dataSource.initialize();
      return {
        store: new TypeOrmIdempotencyStore(dataSource, options.storeOptions),
        recordEffect: transactionalEffect(insert),
        close: () => destroyQuietly(dataSource),
      };
    },
    readEffects: options.transactional ? () => db.readEffects() : undefined,
    async dispose() {
      await proxy.stop();
      await db.drop();
    },
  };
}

/** mysql2, its pools setting `idle_transaction_timeout` (2 s) on every connection they open. */
function mysql2EndingIdleTransactions(): object {
  const mysql2 = require('mysql2') as {
    createPool(options: object): { on(event: 'connection', fn: (c: { query(sql: string): void }) => void): void };
  };
  return {
    ...mysql2,
    createPool(options: object) {
      const pool = mysql2.createPool(options);
      pool.on('connection', (connection) => connection.query('SET SESSION idle_transaction_timeout = 2'));
      return pool;
    },
  };
}

/** Closing a pool whose connections a fault cut may fail; the test is over by then. */
async function destroyQuietly(dataSource: DataSource): Promise<void> {
  await Promise.race([dataSource.destroy().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
}
