import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyConfigurationError, IdempotencyModule } from '../../lib/index.js';
import {
  applyTransition,
  defineStateMachine,
  IllegalStateTransitionError,
  OptimisticLockError,
  PrismaIdempotencyStore,
  prismaIdempotencyMigrationSql,
  updateWithVersion,
} from '../../lib/prisma/index.js';
import { providerOf } from '../../lib/prisma/prisma-client.js';
import { DATABASES, uniqueName, type TestDatabase } from './support.js';

describe.each(DATABASES)('PrismaIdempotencyStore at boot, and the entity patterns, on %s', (_name, create) => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await create();
  }, 60_000);
  afterAll(async () => {
    await db?.destroy();
  });

  it('reads the provider from the generated client (the one unpublished field this entry point reads)', () => {
    expect(providerOf(db.prisma)).toBe(db.provider);
  });

  it('a missing table stops the application at boot, with the fix in the message; the migration SQL creates it', async () => {
    const tableName = uniqueName('records');
    const store = new PrismaIdempotencyStore(db.prisma, { tableName });
    @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    const boot = app.init();
    await expect(boot).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    const problem = (await boot.catch((error: unknown) => error)) as IdempotencyConfigurationError;
    expect(problem.message).toContain(`idempotency records table`);
    expect(problem.message).toContain(tableName);
    expect(problem.hint).toContain('schema.prisma');
    expect(problem.hint).toContain(`prismaIdempotencyMigrationSql('postgresql' | 'mysql', '${tableName}')`);
    await app.close().catch(() => undefined);

    for (const statement of prismaIdempotencyMigrationSql(db.provider, tableName).split(/;\n/)) {
      if (statement.trim()) await db.prisma.$executeRawUnsafe(statement);
    }
    await expect(store.verify()).resolves.toBeUndefined();
  });

  it('updateWithVersion writes only at the version read, and throws OptimisticLockError (with the version found) otherwise', async () => {
    const id = uniqueName('acct');
    await db.prisma.account.create({ data: { id, balance: 100 } });
    expect(await updateWithVersion(db.prisma.account, { id }, 0, { balance: 90 })).toBe(1);
    const stale = updateWithVersion(db.prisma.account, { id }, 0, { balance: 80 });
    await expect(stale).rejects.toBeInstanceOf(OptimisticLockError);
    await expect(stale).rejects.toMatchObject({ expectedVersion: 0, actualVersion: 1 });
    expect(await db.prisma.account.findUnique({ where: { id } })).toMatchObject({ balance: 90, version: 1 });
    await expect(updateWithVersion(db.prisma.account, { id: 'gone' }, 0, { balance: 1 })).rejects.toMatchObject({
      actualVersion: undefined,
    });
  });

  it('applyTransition moves a row once: a repeat is a no-op, an undeclared move is refused', async () => {
    const lifecycle = defineStateMachine({ pending: ['paid', 'cancelled'], paid: ['shipped'] }, { name: 'Order' });
    const id = uniqueName('order');
    await db.prisma.order.create({ data: { id, status: 'pending' } });
    expect(await applyTransition(db.prisma.order, { id }, lifecycle, 'paid')).toEqual({
      applied: true,
      from: 'pending',
      to: 'paid',
      version: 1,
    });
    expect(await applyTransition(db.prisma.order, { id }, lifecycle, 'paid')).toMatchObject({ applied: false, to: 'paid' });
    await expect(applyTransition(db.prisma.order, { id }, lifecycle, 'cancelled')).rejects.toBeInstanceOf(IllegalStateTransitionError);
    // A caller that read 'pending' at version 0 meets the row moved on: the transition is re-checked.
    await expect(
      applyTransition(db.prisma.order, { id }, lifecycle, 'shipped', { from: 'pending', expectedVersion: 0 }),
    ).rejects.toBeInstanceOf(IllegalStateTransitionError);
    expect(await db.prisma.order.findUnique({ where: { id } })).toMatchObject({ status: 'paid', version: 1 });
  });
});
