import { randomUUID } from 'node:crypto';
import { PrismaIdempotencyStore, prismaIdempotencyMigrationSql } from '../../lib/prisma/index.js';
import { DATABASES, uniqueName, type TestDatabase } from './support.js';

/*
 * One SQL for every table the store needs (issue 43): `prismaIdempotencyMigrationSql()` as
 * a migration file creates the records, steps and outbox tables, and the store's boot checks
 * (the outbox's included) pass on them; as a later migration file, it creates only what an
 * older version's SQL left out.
 */

async function apply(db: TestDatabase, sql: string): Promise<void> {
  for (const statement of sql.split(/;\n/)) if (statement.trim()) await db.prisma.$executeRawUnsafe(statement);
}

describe.each(DATABASES)('prismaIdempotencyMigrationSql() on %s', (_name, create) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await create();
  });
  afterAll(async () => {
    await db.destroy();
  });

  it('creates every table the store needs: the boot check and the outbox check pass, and a relay claims a staged message', async () => {
    const tableName = uniqueName('records');
    const store = new PrismaIdempotencyStore(db.prisma, { tableName });
    await apply(db, prismaIdempotencyMigrationSql(db.provider, tableName));
    await store.verify();
    await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
    const key = 'k' + randomUUID().replace(/-/g, '');
    const id = randomUUID().replace(/-/g, '');
    await store.claim(key, { token: 't', leaseTtl: 10_000 });
    await expect(store.saveStep(key, 't', { step: 's1', result: 'one', ttl: 60_000 })).resolves.toBe(true);
    const outbox = { id, messages: '[]', count: 1 };
    await expect(store.complete(key, 't', { result: 'done', ttl: 60_000, outbox })).resolves.toBe(true);
    const claimed = await store.claimOutbox({ owner: 'relay-1', limit: 10, claimTtl: 5_000 });
    expect(claimed).toEqual([expect.objectContaining({ id, next: 0 })]);
    await expect(store.settleOutbox(id, 'relay-1', { next: 1 })).resolves.toBe(true);
    await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
  });

  it('applied again over the tables of an older version, adds the missing outbox and keeps the records', async () => {
    const tableName = uniqueName('records');
    const store = new PrismaIdempotencyStore(db.prisma, { tableName });
    const sql = prismaIdempotencyMigrationSql(db.provider, tableName);
    // The SQL of the version before the outbox: the records and steps statements only.
    await apply(
      db,
      sql
        .split(/;\n/)
        .filter((statement) => !statement.includes(`${tableName}_outbox`))
        .join(';\n'),
    );
    await store.verify();
    await expect(store.outboxBacklog()).rejects.toThrow(/outbox/);
    const key = 'k' + randomUUID().replace(/-/g, '');
    await store.claim(key, { token: 't', leaseTtl: 10_000 });
    await store.complete(key, 't', { result: 'kept', ttl: 600_000 });
    await apply(db, sql);
    await expect(store.get(key)).resolves.toMatchObject({ status: 'completed', result: 'kept' });
    await expect(store.outboxBacklog()).resolves.toEqual({ pending: 0 });
  });
});
