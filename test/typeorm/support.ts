import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { DataSource, type DataSourceOptions, type MixedList, type EntitySchema } from 'typeorm';

import { pgConnection } from '../support/postgres.js';

export { pgConnection };

/** A name no other Jest worker or run uses. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

type Entities = MixedList<Function | string | EntitySchema>;

/**
 * A DataSource whose tables live in a fresh schema of its own, dropped by `destroy`,
 * so parallel test files never see each other's tables.
 */
export async function createPgDataSource(
  options: {
    entities?: Entities;
    poolSize?: number;
    schema?: string;
    synchronize?: boolean;
    migrations?: DataSourceOptions['migrations'];
  } = {},
) {
  const schema = options.schema ?? uniqueName('idem');
  const admin = new DataSource({ ...pgConnection, poolSize: 1 });
  await admin.initialize();
  await admin.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  await admin.destroy();
  const dataSource = new DataSource({
    ...pgConnection,
    schema,
    entities: options.entities ?? [],
    migrations: options.migrations ?? [],
    synchronize: options.synchronize ?? true,
    poolSize: options.poolSize ?? 5,
    logging: false,
  });
  await dataSource.initialize();
  return {
    dataSource,
    schema,
    /** Destroys the DataSource and drops the schema with everything in it. */
    async destroy(dropSchema = true) {
      if (dropSchema) await dataSource.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await dataSource.destroy();
    },
  };
}

export async function createSqljsDataSource(options: { entities?: Entities; synchronize?: boolean } = {}) {
  const dataSource = new DataSource({
    type: 'sqljs',
    entities: options.entities ?? [],
    synchronize: options.synchronize ?? true,
    logging: false,
  });
  await dataSource.initialize();
  return dataSource;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `condition` until it holds, and fails with `what` once `timeoutMs` passed
 * (well before Jest's own timeout, so the failure names what never happened).
 */
export async function waitUntil(
  condition: () => Promise<boolean> | boolean,
  { what = 'the condition', timeoutMs = 10_000, pollMs = 20 }: { what?: string; timeoutMs?: number; pollMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}.`);
    await sleep(pollMs);
  }
}

/** A promise with its resolver, to hold work at a known point until the test releases it. */
export function gate<T = void>(): { promise: Promise<T>; open: (value: T) => void } {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => (open = resolve));
  return { promise, open };
}

/** Milliseconds on the database clock, the one every PostgreSQL expiry is computed with. */
export async function pgNowMs(dataSource: DataSource): Promise<number> {
  const [{ now }] = await dataSource.query(`SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now`);
  return Number(now);
}
