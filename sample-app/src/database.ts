import { existsSync } from 'node:fs';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { idempotencyEntities } from '../../lib/typeorm/index.js';
import type { SampleAppConfig } from './config.js';
import { Account, ENTITIES, InventoryItem } from './entities.js';

export const DEMO_ACCOUNT = 'acct_1';
/** The account of the demo's anti-example (demo/naive-refunds.controller.ts). */
export const NAIVE_ACCOUNT = 'acct_naive';
export const DEMO_SKUS = ['sku_mug', 'sku_tee', 'sku_cap'] as const;

/**
 * PostgreSQL when `DATABASE_URL` is set, otherwise SQLite embedded in the process
 * (sql.js, pure WebAssembly: nothing to install or run). `synchronize` keeps the sample
 * short; a real service runs migrations, including `CreateIdempotencyTables1700000000000`.
 */
export function dataSourceOptions(config: SampleAppConfig): DataSourceOptions {
  // The tables of runIdempotentTransaction (records, steps, outbox) live beside the business tables.
  const entities = [...ENTITIES, ...idempotencyEntities];
  if (config.databaseUrl) {
    return { type: 'postgres', url: config.databaseUrl, schema: config.databaseSchema, entities, synchronize: true, poolSize: 10 };
  }
  if (config.sqliteFile) {
    // autoSave writes the file after every committed transaction: a SIGKILL loses only
    // transactions that had not committed, exactly like a server database would.
    return { type: 'sqljs', location: config.sqliteFile, autoSave: true, entities, synchronize: true };
  }
  return { type: 'sqljs', entities, synchronize: true };
}

export async function openDatabase(config: SampleAppConfig): Promise<DataSource> {
  if (config.databaseUrl && config.databaseSchema) {
    // TypeORM synchronizes into the schema but does not create it.
    const bootstrap = new DataSource({ type: 'postgres', url: config.databaseUrl });
    await bootstrap.initialize();
    await bootstrap.query(`CREATE SCHEMA IF NOT EXISTS "${config.databaseSchema.replace(/"/g, '')}"`);
    await bootstrap.destroy();
  }
  const fresh = !config.databaseUrl && !(config.sqliteFile && existsSync(config.sqliteFile));
  const dataSource = new DataSource(dataSourceOptions(config));
  await dataSource.initialize();
  await seed(dataSource, config, fresh);
  return dataSource;
}

/** The demo account and SKUs, created once (a restart on a kept SQLite file or on PostgreSQL keeps them). */
async function seed(dataSource: DataSource, config: SampleAppConfig, fresh: boolean): Promise<void> {
  const accounts = dataSource.getRepository(Account);
  for (const id of [DEMO_ACCOUNT, NAIVE_ACCOUNT]) {
    if (fresh || !(await accounts.existsBy({ id }))) await accounts.save({ id, balance: config.openingBalance });
  }
  const items = dataSource.getRepository(InventoryItem);
  for (const sku of DEMO_SKUS) {
    if (fresh || !(await items.existsBy({ sku }))) await items.save({ sku, stock: config.openingStock });
  }
}
