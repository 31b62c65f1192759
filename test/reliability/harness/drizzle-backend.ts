/**
 * The Drizzle backend of the harness app: drizzle-orm on node-postgres (the run's schema
 * through the pool's search_path, its application_name for pg_terminate_backend), or on
 * mysql2 with `HARNESS_DB=mariadb` (the run's database). The tables are the ones the
 * harness database creates (the TypeORM store's DDL, which the Drizzle store shares). With
 * `HARNESS_TRANSACTIONAL=1` the effect row is written through getIdempotentTransaction(),
 * so the effect and the record commit together or not at all.
 */
import { ServiceUnavailableException } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { createPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { DrizzleIdempotencyStore, getIdempotentTransaction } from '../../../lib/drizzle/index.js';
import { mariadbConnection } from '../../support/mariadb.js';
import { pgConnection } from '../../support/postgres.js';
import type { Effect } from './invariant.js';
import { EFFECTS_TABLE } from './postgres.js';

interface DrizzleLike {
  execute(query: unknown): Promise<unknown>;
}

export async function createDrizzleBackend(options: { schema: string; applicationName: string }) {
  if (process.env.HARNESS_DB === 'mariadb') {
    const pool = createPool({
      host: mariadbConnection.host,
      port: mariadbConnection.port,
      user: mariadbConnection.username,
      password: mariadbConnection.password,
      database: options.schema,
      connectionLimit: 5,
    });
    return backend(drizzleMysql(pool), () => pool.end());
  }
  const pool = new Pool({
    host: pgConnection.host,
    port: pgConnection.port,
    user: pgConnection.username,
    password: pgConnection.password,
    database: pgConnection.database,
    max: 5,
    application_name: options.applicationName,
    options: `-c search_path=${options.schema}`,
  });
  // An idle client the server terminated is reported on the pool: a real app listens too.
  pool.on('error', () => {});
  return backend(drizzlePg(pool), () => pool.end());
}

function backend(db: object, end: () => Promise<void>) {
  return {
    store: new DrizzleIdempotencyStore(db),
    /** Inserts the effect row in the running idempotent transaction. */
    async recordTransactionalEffect(effect: Effect): Promise<void> {
      const tx = getIdempotentTransaction() as DrizzleLike;
      // The handler's own write failing on a dropped connection is the handler's error to
      // map; like a real app it answers 503 (retry later), the transaction is rolled back.
      await tx
        .execute(
          sql`INSERT INTO ${sql.raw(EFFECTS_TABLE)} (${sql.raw(process.env.HARNESS_DB === 'mariadb' ? '`key`' : 'key')}, effect_id, app, pid) VALUES (${effect.key}, ${effect.effectId}, ${effect.app}, ${effect.pid})`,
        )
        .catch((error: unknown) => {
          throw new ServiceUnavailableException(`database unavailable: ${(error as Error).message}`);
        });
    },
    close: end,
  };
}
