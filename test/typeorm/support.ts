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

/** Polls `condition` until it holds (no timing assertion: the test's own timeout bounds it). */
export async function waitUntil(condition: () => Promise<boolean> | boolean, pollMs = 20): Promise<void> {
  while (!(await condition())) await sleep(pollMs);
}
