import { DataSource } from 'typeorm';
import { dataSourceOf, mysqlPoolOf, pgClientOf, pgClientsOf, pgPoolOf } from '../../lib/typeorm/internals.js';
import { guardPgClientErrors } from '../../lib/typeorm/store/pg-client-guard.js';
import { sqlExecutorOf } from '../../lib/typeorm/store/sql-executor.js';
import { pgConnection } from '../support/postgres.js';
import { createMariaDataSource } from './mariadb/support.js';
import { createPgDataSource, createSqljsDataSource } from './support.js';

// Every field of TypeORM or node-postgres the library reads without it being published
// (lib/typeorm/internals.ts). This file runs on TypeORM 1.x (`npx jest test/typeorm`) and
// 0.3 (`npm run test:typeorm03`), so an upgrade that moves one of them fails here by name.
describe('TypeORM and pg internals the library relies on', () => {
  describe('on PostgreSQL', () => {
    let db: Awaited<ReturnType<typeof createPgDataSource>>;
    beforeAll(async () => {
      db = await createPgDataSource({ poolSize: 2, synchronize: false });
    });
    afterAll(async () => {
      await db.destroy();
    });

    it('finds the DataSource of a query runner and of an entity manager', async () => {
      const runner = db.dataSource.createQueryRunner();
      try {
        expect(dataSourceOf(runner)).toBe(db.dataSource);
        expect(dataSourceOf(runner.manager)).toBe(db.dataSource);
        expect(dataSourceOf(db.dataSource.manager)).toBe(db.dataSource);
      } finally {
        await runner.release();
      }
    });

    it("reaches the driver's pg pool, which runs a named statement and lists its clients", async () => {
      const pool = pgPoolOf(db.dataSource);
      expect(pool).toBeDefined();
      const result = await pool!.query({ name: 'nestjs_idem_internals_probe', text: 'SELECT $1::int AS one', values: [1] });
      expect(result.rows).toEqual([{ one: 1 }]);
      const clients = pgClientsOf(pool!);
      expect(clients.length).toBeGreaterThan(0);
      for (const client of clients) {
        expect(typeof client.on).toBe('function');
        expect(Array.isArray(client.listeners('error'))).toBe(true);
      }
    });

    it('reaches the pg client of a connected query runner, and only while it holds one', async () => {
      const runner = db.dataSource.createQueryRunner();
      expect(pgClientOf(runner)).toBeUndefined();
      await runner.connect();
      const client = pgClientOf(runner);
      expect(client).toBeDefined();
      await runner.startTransaction();
      try {
        // The client is the runner's own connection: it sees the runner's transaction.
        await runner.query(`SELECT set_config('application_name', 'internals_probe', true)`);
        const { rows } = await client!.query({ text: `SELECT current_setting('application_name') AS name` });
        expect(rows).toEqual([{ name: 'internals_probe' }]);
      } finally {
        await runner.rollbackTransaction();
        await runner.release();
      }
      expect(pgClientOf(runner)).toBeUndefined();
    });

    it('guards every pooled client against unhandled error events', async () => {
      guardPgClientErrors(db.dataSource);
      const runner = db.dataSource.createQueryRunner();
      try {
        await runner.connect();
        const clients = pgClientsOf(pgPoolOf(db.dataSource)!);
        for (const client of clients) expect(client.listeners('error').length).toBeGreaterThan(0);
      } finally {
        await runner.release();
      }
    });

    it('chooses the executor once per initialized DataSource', () => {
      expect(sqlExecutorOf(db.dataSource)).toBe(sqlExecutorOf(db.dataSource));
    });

    it('finds no pool before initialize() and after destroy()', async () => {
      const dataSource = new DataSource({ ...pgConnection, poolSize: 1 });
      expect(pgPoolOf(dataSource)).toBeUndefined();
      // Not remembered: the pool path must be chosen once the DataSource has a pool.
      expect(sqlExecutorOf(dataSource)).not.toBe(sqlExecutorOf(dataSource));
      await dataSource.initialize();
      expect(pgPoolOf(dataSource)).toBeDefined();
      await dataSource.destroy();
      expect(pgPoolOf(dataSource)).toBeUndefined();
    });
  });

  describe('on MariaDB', () => {
    it("reaches the driver's mysql2 pool while the DataSource is initialized, and runs a statement on it", async () => {
      const db = await createMariaDataSource({ poolSize: 2, synchronize: false });
      const pool = mysqlPoolOf(db.dataSource);
      expect(pool).toBeDefined();
      const rows = await new Promise((resolve, reject) =>
        pool!.query('SELECT ? AS one', [1], (error, result) => (error ? reject(error) : resolve(result))),
      );
      expect(rows).toEqual([{ one: 1 }]);
      expect(sqlExecutorOf(db.dataSource).constructor.name).toBe('MysqlPoolExecutor');
      await db.destroy();
      expect(mysqlPoolOf(db.dataSource)).toBeUndefined();
    });
  });

  describe('on SQLite (sql.js)', () => {
    let dataSource: DataSource;
    beforeAll(async () => {
      dataSource = await createSqljsDataSource();
    });
    afterAll(async () => {
      await dataSource.destroy();
    });

    it('finds the DataSource of a query runner and of an entity manager, and no pg pool or client', async () => {
      const runner = dataSource.createQueryRunner();
      try {
        await runner.connect();
        expect(dataSourceOf(runner)).toBe(dataSource);
        expect(dataSourceOf(dataSource.manager)).toBe(dataSource);
        expect(pgPoolOf(dataSource)).toBeUndefined();
        expect(mysqlPoolOf(dataSource)).toBeUndefined();
        expect(pgClientOf(runner)).toBeUndefined();
      } finally {
        await runner.release();
      }
    });
  });
});
