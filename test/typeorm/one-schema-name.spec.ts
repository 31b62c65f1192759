import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import {
  AddIdempotencySteps1720000000000,
  CreateIdempotencyRecords1700000000000,
  CreateIdempotencyTables1700000000000,
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  TypeOrmIdempotencyStore,
  createIdempotencyEntities,
  createIdempotencyTablesMigration,
  findIdempotentEntityManager,
  findIdempotentTransaction,
  getIdempotentEntityManager,
  getIdempotentTransaction,
  idempotencyEntities,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { createMariaDataSource } from './mariadb/support.js';
import { createPgDataSource, createSqljsDataSource, uniqueName } from './support.js';

/*
 * One name per ORM for every table the installed version needs (issue 43): an application
 * that registers `...idempotencyEntities` and lets TypeORM synchronize gets the records,
 * steps and outbox tables, and the store's boot checks pass, with no other line of code; the
 * one migration creates whatever is missing, and leaves synchronize nothing to change.
 */

const key = () => 'k' + randomUUID().replace(/-/g, '');

/**
 * The store's boot check (records and steps), the outbox's (the backlog `IdempotencyOutbox`
 * reads at boot, a configuration error without the table), then one record with a step and a
 * staged message, claimed and settled by a relay: every table, through the store's own statements.
 */
async function useEveryTable(store: TypeOrmIdempotencyStore): Promise<void> {
  await store.verify();
  await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
  const k = key();
  const outboxId = randomUUID().replace(/-/g, '');
  await store.claim(k, { token: 't', leaseTtl: 10_000 });
  await expect(store.saveStep(k, 't', { step: 'charge', result: '"ch_1"', ttl: 60_000 })).resolves.toBe(true);
  await expect(store.loadSteps(k)).resolves.toEqual({ charge: '"ch_1"' });
  const outbox = { id: outboxId, messages: JSON.stringify([{ client: 'BROKER', pattern: 'paid', data: 1 }]), count: 1 };
  await expect(store.complete(k, 't', { result: '"done"', ttl: 60_000, outbox })).resolves.toBe(true);
  const backlog = await store.outboxBacklog();
  expect(backlog.pending).toBe(1);
  const claimed = await store.claimOutbox({ owner: 'relay-1', limit: 10, claimTtl: 5_000 });
  expect(claimed).toEqual([expect.objectContaining({ id: outboxId, messages: outbox.messages, next: 0 })]);
  await expect(store.settleOutbox(outboxId, 'relay-1', { next: 1 })).resolves.toBe(true);
  await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
}

async function pendingSchemaChanges(dataSource: DataSource): Promise<string[]> {
  return (await dataSource.driver.createSchemaBuilder().log()).upQueries.map((q) => q.query);
}

describe('one entities array and one migration for every idempotency table, on PostgreSQL', () => {
  it('an application that registers only ...idempotencyEntities with synchronize gets every table, and the boot checks pass', async () => {
    const db = await createPgDataSource({ entities: [...idempotencyEntities], synchronize: true, poolSize: 3 });
    try {
      const tables = await db.dataSource.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [
        db.schema,
      ]);
      expect(tables.map((t: { table_name: string }) => t.table_name)).toEqual([
        'idempotency_records',
        'idempotency_records_outbox',
        'idempotency_records_steps',
      ]);
      await useEveryTable(new TypeOrmIdempotencyStore(db.dataSource));
    } finally {
      await db.destroy();
    }
  });

  it('the same upgrade with the 0.6 registration (records and steps entities) leaves the outbox table missing', async () => {
    const db = await createPgDataSource({ entities: [IdempotencyRecordEntity, IdempotencyStepEntity], synchronize: true, poolSize: 2 });
    try {
      const store = new TypeOrmIdempotencyStore(db.dataSource);
      await store.verify();
      await expect(store.outboxBacklog()).rejects.toThrow(IdempotencyConfigurationError);
    } finally {
      await db.destroy();
    }
  });

  it('CreateIdempotencyTables1700000000000 makes the tables the entities describe (synchronize has nothing to change), and runs again harmlessly', async () => {
    const db = await createPgDataSource({
      entities: [...idempotencyEntities],
      migrations: [CreateIdempotencyTables1700000000000],
      synchronize: false,
      poolSize: 3,
    });
    try {
      await db.dataSource.runMigrations();
      expect(await pendingSchemaChanges(db.dataSource)).toEqual([]);
      const runner = db.dataSource.createQueryRunner();
      try {
        await new CreateIdempotencyTables1700000000000().up(runner);
      } finally {
        await runner.release();
      }
      await useEveryTable(new TypeOrmIdempotencyStore(db.dataSource));
    } finally {
      await db.destroy();
    }
  });

  it('upgrading a database made by the 0.5 and 0.6 migrations: the one migration adds only what is missing and keeps the records', async () => {
    const old = await createPgDataSource({
      migrations: [CreateIdempotencyRecords1700000000000, AddIdempotencySteps1720000000000],
      synchronize: false,
      poolSize: 2,
    });
    const k = key();
    try {
      await old.dataSource.runMigrations();
      const before = new TypeOrmIdempotencyStore(old.dataSource);
      await before.claim(k, { token: 'old', leaseTtl: 10_000 });
      await before.complete(k, 'old', { result: '"kept"', ttl: 600_000 });
    } finally {
      await old.destroy(false);
    }
    const upgraded = await createPgDataSource({
      schema: old.schema,
      migrations: [
        CreateIdempotencyRecords1700000000000,
        AddIdempotencySteps1720000000000,
        createIdempotencyTablesMigration({ timestamp: 1765000000000 }),
      ],
      synchronize: false,
      poolSize: 3,
    });
    try {
      const ran = await upgraded.dataSource.runMigrations();
      expect(ran.map((m) => m.name)).toEqual(['CreateIdempotencyTables1765000000000']);
      const store = new TypeOrmIdempotencyStore(upgraded.dataSource);
      await expect(store.get(k)).resolves.toMatchObject({ status: 'completed', result: '"kept"' });
      await useEveryTable(store);
    } finally {
      await upgraded.destroy();
    }
  });

  it('createIdempotencyEntities and createIdempotencyTablesMigration serve a records table with another name', async () => {
    const db = await createPgDataSource({ synchronize: false, poolSize: 1 });
    const tableName = `${db.schema}.${uniqueName('billing_idem')}`;
    await db.destroy(false);
    const entities = createIdempotencyEntities({ tableName });
    expect(createIdempotencyEntities({ tableName })).toBe(entities);
    expect(createIdempotencyEntities()).toBe(idempotencyEntities);
    const Migration = createIdempotencyTablesMigration({ tableName, timestamp: 1735000000000 });
    const custom = await createPgDataSource({
      schema: db.schema,
      entities: [...entities],
      migrations: [Migration],
      synchronize: false,
      poolSize: 3,
    });
    try {
      await custom.dataSource.runMigrations();
      expect(await pendingSchemaChanges(custom.dataSource)).toEqual([]);
      await useEveryTable(new TypeOrmIdempotencyStore(custom.dataSource, { tableName }));
    } finally {
      await custom.destroy();
    }
  });
});

describe('one entities array and one migration for every idempotency table, on MariaDB', () => {
  it('an application that registers only ...idempotencyEntities with synchronize gets every table, and the boot checks pass', async () => {
    const db = await createMariaDataSource({ entities: [...idempotencyEntities], synchronize: true, poolSize: 3 });
    try {
      const tables = await db.dataSource.query(`SELECT table_name AS t FROM information_schema.tables WHERE table_schema = ? ORDER BY 1`, [
        db.database,
      ]);
      expect(tables.map((t: { t: string }) => t.t)).toEqual([
        'idempotency_records',
        'idempotency_records_outbox',
        'idempotency_records_steps',
      ]);
      await useEveryTable(new TypeOrmIdempotencyStore(db.dataSource));
    } finally {
      await db.destroy();
    }
  });

  it('CreateIdempotencyTables1700000000000 makes the tables the entities describe (synchronize has nothing to change); down drops them', async () => {
    const db = await createMariaDataSource({
      entities: [...idempotencyEntities],
      migrations: [CreateIdempotencyTables1700000000000],
      synchronize: false,
      poolSize: 3,
    });
    try {
      await db.dataSource.runMigrations();
      expect(await pendingSchemaChanges(db.dataSource)).toEqual([]);
      await useEveryTable(new TypeOrmIdempotencyStore(db.dataSource));
      const runner = db.dataSource.createQueryRunner();
      try {
        await new CreateIdempotencyTables1700000000000().up(runner);
        await new CreateIdempotencyTables1700000000000().down(runner);
      } finally {
        await runner.release();
      }
      expect(await db.dataSource.query(`SHOW TABLES LIKE 'idempotency_records%'`)).toEqual([]);
    } finally {
      await db.destroy();
    }
  });
});

describe('the factories refuse what TypeORM could not order or name', () => {
  it('createIdempotencyTablesMigration wants 13-digit epoch ms; both factories want a valid table name', () => {
    expect(() => createIdempotencyTablesMigration({ timestamp: 173500000000 })).toThrow(IdempotencyConfigurationError);
    expect(() => createIdempotencyTablesMigration({ timestamp: 1735000000000.5 })).toThrow(/13-digit epoch ms/);
    expect(new (createIdempotencyTablesMigration({ timestamp: 1735000000000 }))().name).toBe('CreateIdempotencyTables1735000000000');
    expect(() => createIdempotencyTablesMigration({ tableName: 'bad name' })).toThrow(IdempotencyConfigurationError);
    expect(() => createIdempotencyEntities({ tableName: 'a.b.c' })).toThrow(IdempotencyConfigurationError);
  });
});

describe('the same names on SQLite (sql.js), which has no outbox', () => {
  it('synchronize with ...idempotencyEntities and the migration both give a store whose boot check passes', async () => {
    const synced = await createSqljsDataSource({ entities: [...idempotencyEntities], synchronize: true });
    try {
      const store = new TypeOrmIdempotencyStore(synced);
      await store.verify();
      expect(store.outboxAvailable).toBe(false);
    } finally {
      await synced.destroy();
    }
    const migrated = await createSqljsDataSource({ synchronize: false });
    try {
      const runner = migrated.createQueryRunner();
      try {
        await new CreateIdempotencyTables1700000000000().up(runner);
      } finally {
        await runner.release();
      }
      const k = key();
      const store = new TypeOrmIdempotencyStore(migrated);
      await store.verify();
      await store.claim(k, { token: 't', leaseTtl: 10_000 });
      await expect(store.saveStep(k, 't', { step: 's', result: '1', ttl: 60_000 })).resolves.toBe(true);
    } finally {
      await migrated.destroy();
    }
  });
});

describe('getIdempotentTransaction on TypeORM (the name the Prisma and Drizzle entry points use)', () => {
  it('returns the EntityManager of the idempotent transaction, as the deprecated names do; find* answers undefined outside one', async () => {
    const db = await createPgDataSource({ entities: [...idempotencyEntities], synchronize: true, poolSize: 2 });
    try {
      expect(findIdempotentTransaction()).toBeUndefined();
      expect(() => getIdempotentTransaction()).toThrow(/getIdempotentTransaction\(\) was called outside an idempotent transaction/);
      const seen = await runIdempotentTransaction(db.dataSource, { key: key() }, async (manager) => {
        expect(getIdempotentTransaction()).toBe(manager);
        expect(findIdempotentTransaction()).toBe(manager);
        expect(getIdempotentEntityManager()).toBe(manager);
        expect(findIdempotentEntityManager()).toBe(manager);
        return (await getIdempotentTransaction().query('SELECT 1 AS one'))[0].one;
      });
      expect(seen).toBe(1);
    } finally {
      await db.destroy();
    }
  });
});
