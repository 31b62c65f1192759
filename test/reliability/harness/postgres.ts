/**
 * PostgreSQL side of the harness: a schema of its own per run (records table and, for
 * transactional effects, an effects table), the connection settings the application
 * processes use, and the fault: terminating every connection of the harness's
 * `application_name`.
 */
import 'reflect-metadata';
import { DataSource } from 'typeorm';
import { pgConnection } from '../../support/postgres.js';
import type { Effect } from './invariant.js';

export const EFFECTS_TABLE = 'harness_effects';

/** The DataSource of an application process (or of the test): one schema, one application_name. */
export function harnessDataSource(schema: string, applicationName: string, poolSize = 5): DataSource {
  return new DataSource({ ...pgConnection, schema, applicationName, poolSize, logging: false });
}

export class HarnessDatabase {
  private readonly admin: DataSource;

  constructor(
    readonly schema: string,
    /** `application_name` of the application processes' connections. */
    readonly applicationName: string,
  ) {
    // The admin connection has another application_name, so terminating the apps' connections spares it.
    this.admin = harnessDataSource(schema, `${applicationName}-admin`, 2);
  }

  async create(): Promise<void> {
    const admin = new DataSource({ ...pgConnection, poolSize: 1 });
    await admin.initialize();
    await admin.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`);
    await admin.destroy();
    await this.admin.initialize();
    const { TypeOrmIdempotencyStore } = await import('../../../lib/typeorm/index.js');
    await new TypeOrmIdempotencyStore(this.admin).ensureTable();
    await this.admin.query(
      `CREATE TABLE IF NOT EXISTS "${this.schema}".${EFFECTS_TABLE} (id bigserial PRIMARY KEY, key text NOT NULL, effect_id text NOT NULL, app text NOT NULL, pid int NOT NULL)`,
    );
  }

  /** Terminates every connection of the application processes; returns how many. */
  async terminateAppConnections(): Promise<number> {
    const rows = (await this.admin.query(
      'SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()',
      [this.applicationName],
    )) as Array<{ terminated: boolean }>;
    return rows.filter((row) => row.terminated).length;
  }

  /** Effects committed by transactional handlers. */
  async readEffects(): Promise<Effect[]> {
    const rows = (await this.admin.query(`SELECT key, effect_id, app, pid FROM "${this.schema}".${EFFECTS_TABLE} ORDER BY id`)) as Array<{
      key: string;
      effect_id: string;
      app: string;
      pid: number;
    }>;
    return rows.map((row) => ({ key: row.key, effectId: row.effect_id, app: row.app, pid: row.pid }));
  }

  async drop(): Promise<void> {
    if (!this.admin.isInitialized) return;
    await this.admin.query(`DROP SCHEMA IF EXISTS "${this.schema}" CASCADE`);
    await this.admin.destroy();
  }
}
