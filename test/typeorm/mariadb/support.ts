import 'reflect-metadata';
import { DataSource, type DataSourceOptions, type EntitySchema, type MixedList } from 'typeorm';
import { mariadbConnection } from '../../support/mariadb.js';
import { uniqueName, waitUntil } from '../support.js';

export { mariadbConnection };

type Entities = MixedList<Function | string | EntitySchema>;

/**
 * A DataSource on a fresh database of its own (MySQL's schemas are databases), dropped by
 * `destroy`, so parallel test files never see each other's tables. `type: 'mysql'` runs
 * the same server through TypeORM's mysql driver, as many MariaDB users do.
 */
export async function createMariaDataSource(
  options: {
    entities?: Entities;
    poolSize?: number;
    database?: string;
    synchronize?: boolean;
    migrations?: DataSourceOptions['migrations'];
    type?: 'mariadb' | 'mysql';
    extra?: Record<string, unknown>;
    flags?: string;
    /** TypeORM's logger (with `logging: ['query']`), to see the statements the store sends. */
    logger?: DataSourceOptions['logger'];
  } = {},
) {
  const database = options.database ?? uniqueName('idem');
  const admin = new DataSource({ ...mariadbConnection, poolSize: 1 });
  await admin.initialize();
  await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
  await admin.destroy();
  const dataSource = new DataSource({
    ...mariadbConnection,
    type: options.type ?? 'mariadb',
    database,
    entities: options.entities ?? [],
    migrations: options.migrations ?? [],
    synchronize: options.synchronize ?? true,
    poolSize: options.poolSize ?? 5,
    logging: options.logger ? ['query'] : false,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.extra ? { extra: options.extra } : {}),
    ...(options.flags ? { flags: options.flags } : {}),
  } as DataSourceOptions);
  await dataSource.initialize();
  return {
    dataSource,
    database,
    /** Destroys the DataSource and drops the database with everything in it. */
    async destroy(dropDatabase = true) {
      if (dropDatabase) await dataSource.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await dataSource.destroy();
    },
  };
}

/** Milliseconds on the server clock, the one every MySQL / MariaDB expiry is computed with. */
export async function mariaNowMs(dataSource: DataSource): Promise<number> {
  const [{ now }] = await dataSource.query(`SELECT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000) AS now`);
  return Number(now);
}

/**
 * Resolves once some session waits for a row lock (InnoDB) on a statement like `like`.
 * Polls every 150 ms: InnoDB refreshes what information_schema.INNODB_TRX shows only when
 * it was not read for 100 ms, so a faster poll would keep reading a stale copy forever.
 */
export async function waitForLockWait(dataSource: DataSource, like: string, what: string): Promise<void> {
  await waitUntil(
    async () =>
      (
        await dataSource.query(`SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ? LIMIT 1`, [
          like,
        ])
      ).length > 0,
    { what, pollMs: 150 },
  );
}

/** Kills a session (KILL CONNECTION) and waits until the server has let it go. */
export async function killConnection(dataSource: DataSource, id: number): Promise<void> {
  await dataSource.query(`KILL CONNECTION ${Number(id)}`);
  const deadline = Date.now() + 10_000;
  while ((await dataSource.query('SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = ?', [id])).length > 0) {
    if (Date.now() > deadline) throw new Error(`connection ${id} still there 10 s after KILL CONNECTION`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
