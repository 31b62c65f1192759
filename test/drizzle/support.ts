import { randomBytes } from 'node:crypto';
import { drizzle as drizzleMysql, type MySql2Database } from 'drizzle-orm/mysql2';
import { drizzle as drizzlePg, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { createPool as createMysqlPool, type Pool as MysqlPool } from 'mysql2/promise';
import { Pool } from 'pg';
import { mariadbConnection } from '../support/mariadb.js';
import { pgConnection } from '../support/postgres.js';

/** A name no other Jest worker or run uses. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** node-postgres settings of the test PostgreSQL, optionally with a search_path. */
export function pgPoolConfig(schema?: string, max = 5) {
  return {
    host: pgConnection.host,
    port: pgConnection.port,
    user: pgConnection.username,
    password: pgConnection.password,
    database: pgConnection.database,
    max,
    ...(schema ? { options: `-c search_path=${schema}` } : {}),
  };
}

/**
 * A Drizzle database on node-postgres whose unqualified tables live in a fresh schema of
 * its own (the pool's search_path), dropped by `destroy`, so parallel test files never see
 * each other's tables.
 */
export async function createPgDrizzle(options: { poolSize?: number; schema?: string } = {}) {
  const schema = options.schema ?? uniqueName('idem_dz');
  const admin = new Pool(pgPoolConfig(undefined, 1));
  await admin.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  await admin.end();
  const pool = new Pool(pgPoolConfig(schema, options.poolSize ?? 5));
  const db: NodePgDatabase = drizzlePg(pool);
  return {
    db,
    pool,
    schema,
    /** Ends the pool and drops the schema with everything in it. */
    async destroy() {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

/** mysql2 settings of the test MariaDB, optionally on one database. */
export function mysqlPoolConfig(database?: string, connectionLimit = 5) {
  return {
    host: mariadbConnection.host,
    port: mariadbConnection.port,
    user: mariadbConnection.username,
    password: mariadbConnection.password,
    connectionLimit,
    ...(database ? { database } : {}),
  };
}

/** A Drizzle database on mysql2 on a fresh MariaDB database of its own, dropped by `destroy`. */
export async function createMysqlDrizzle(options: { poolSize?: number; database?: string } = {}) {
  const database = options.database ?? uniqueName('idem_dz');
  const admin = createMysqlPool(mysqlPoolConfig(undefined, 1));
  await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
  await admin.end();
  const pool: MysqlPool = createMysqlPool(mysqlPoolConfig(database, options.poolSize ?? 5));
  const db: MySql2Database = drizzleMysql(pool);
  return {
    db,
    pool,
    database,
    /** Ends the pool and drops the database with everything in it. */
    async destroy() {
      await pool.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await pool.end();
    },
  };
}

/**
 * Polls `condition` until it holds, and fails with `what` once `timeoutMs` passed (well
 * before Jest's own timeout, so the failure names what never happened).
 */
export async function waitUntil(
  condition: () => Promise<boolean> | boolean,
  { what = 'the condition', timeoutMs = 10_000, pollMs = 20 }: { what?: string; timeoutMs?: number; pollMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}.`);
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}
