import type { CountingStore } from './counting-store.js';
import type { FloorBackend, FloorName } from './floors.js';

/** The stores the bench knows (bench/stores.ts says what each is). */
export type StoreName = 'memory' | 'redis' | 'redisNear' | 'typeorm' | 'mariadb' | 'prisma' | 'drizzle' | 'node-redis';

export interface BenchStoreOptions {
  /** @default 'redis://127.0.0.1:6379' */
  redisUrl?: string;
  /** ioredis `enableAutoPipelining`. @default false (ioredis's default) */
  autoPipelining?: boolean;
  /** @default 'postgres://postgres@127.0.0.1:5432/test' */
  postgresUrl?: string;
  /** @default 'mysql://root@127.0.0.1:3306/test' */
  mariadbUrl?: string;
  /** Prefix of Redis keys and suffix of the PostgreSQL table, unique per bench process. */
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
