/**
 * MariaDB / MySQL side of the harness: a database of its own per run (records table and,
 * for transactional effects, an effects table), and the fault: KILL CONNECTION on every
 * session the application processes hold (the sessions whose default database is the
 * run's; the admin connection has none, so it survives).
 */
import 'reflect-metadata';
import { DataSource } from 'typeorm';
import { mariadbConnection } from '../../support/mariadb.js';
import type { Effect } from './invariant.js';
import { EFFECTS_TABLE } from './postgres.js';

/** The DataSource of an application process. */
export function harnessMariaDataSource(database: string, poolSize = 5): DataSource {
  return new DataSource({ ...mariadbConnection, database, poolSize, logging: false });
}

export class HarnessMariaDatabase {
  private readonly admin = new DataSource({ ...mariadbConnection, poolSize: 2, logging: false });

  constructor(readonly database: string) {}

  async create(): Promise<void> {
    await this.admin.initialize();
    await this.admin.query(`CREATE DATABASE IF NOT EXISTS \`${this.database}\``);
    const { TypeOrmIdempotencyStore } = await import('../../../lib/typeorm/index.js');
    await new TypeOrmIdempotencyStore(this.admin, { tableName: `${this.database}.idempotency_records` }).ensureTable();
    await this.admin.query(
      `CREATE TABLE IF NOT EXISTS \`${this.database}\`.${EFFECTS_TABLE} (id bigint AUTO_INCREMENT PRIMARY KEY, \`key\` varchar(255) NOT NULL, effect_id varchar(64) NOT NULL, app varchar(64) NOT NULL, pid int NOT NULL) ENGINE=InnoDB`,
    );
  }

  /** KILL CONNECTION on every session of the application processes; returns how many. */
  async killAppConnections(): Promise<number> {
    const rows = (await this.admin.query('SELECT ID AS id FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()', [
      this.database,
    ])) as Array<{ id: number | string }>;
    let killed = 0;
    for (const { id } of rows) {
      // A session may end by itself between the list and the kill (ER_NO_SUCH_THREAD).
      await this.admin.query(`KILL CONNECTION ${Number(id)}`).then(
        () => killed++,
        () => undefined,
      );
    }
    return killed;
  }

  /** Effects committed by transactional handlers. */
  async readEffects(): Promise<Effect[]> {
    const rows = (await this.admin.query(
      `SELECT \`key\`, effect_id, app, pid FROM \`${this.database}\`.${EFFECTS_TABLE} ORDER BY id`,
    )) as Array<{
      key: string;
      effect_id: string;
      app: string;
      pid: number;
    }>;
    return rows.map((row) => ({ key: row.key, effectId: row.effect_id, app: row.app, pid: Number(row.pid) }));
  }

  async drop(): Promise<void> {
    if (!this.admin.isInitialized) return;
    await this.admin.query(`DROP DATABASE IF EXISTS \`${this.database}\``);
    await this.admin.destroy();
  }
}
