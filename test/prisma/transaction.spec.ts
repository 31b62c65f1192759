import 'reflect-metadata';
import { Controller, Module, Param, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import request from 'supertest';
import { IdempotencyFingerprintMismatchError, IdempotencyModule, Idempotent } from '../../lib/index.js';
import {
  executeIdempotentTransaction,
  getIdempotentTransaction,
  PrismaIdempotencyStore,
  runIdempotentTransaction,
} from '../../lib/prisma/index.js';
import { storageKeyOf } from '../../lib/core/hash.js';
import { waitUntil } from '../typeorm/support.js';
import { DATABASES, uniqueName, type TestDatabase, type TestPrismaClient } from './support.js';

// runIdempotentTransaction and @Idempotent({ transactional: true }) on a PrismaIdempotencyStore,
// on PostgreSQL and MariaDB: the record is claimed and completed in the business
// transaction, concurrent duplicates wait and replay, a rollback leaves nothing.

describe.each(DATABASES)('Prisma idempotent transactions on %s', (_name, create) => {
  let db: TestDatabase;
  let prisma: TestPrismaClient;
  let store: PrismaIdempotencyStore;

  beforeAll(async () => {
    db = await create();
    prisma = db.prisma;
    store = new PrismaIdempotencyStore(prisma);
    await store.ensureTable();
  }, 60_000);
  afterAll(async () => {
    await db?.destroy();
  });

  const records = async () =>
    Number(((await prisma.$queryRawUnsafe('SELECT COUNT(*) AS n FROM idempotency_records')) as Array<{ n: unknown }>)[0].n);
  const balanceOf = async (id: string) => (await prisma.account.findUniqueOrThrow({ where: { id } })).balance as number;

  it('30 concurrent duplicate refunds change the balance once, and every caller gets the result', async () => {
    const account = uniqueName('acct');
    await prisma.account.create({ data: { id: account, balance: 1_000 } });
    const key = uniqueName('refund');
    let runs = 0;
    const refund = () =>
      executeIdempotentTransaction(prisma, { key, fingerprint: { account, amount: 30 }, timeout: 20_000, maxWait: 20_000 }, async (tx) => {
        runs++;
        const updated = await tx.account.update({ where: { id: account }, data: { balance: { decrement: 30 } } });
        // Hold the transaction a little, so the duplicates arrive while it is open.
        await new Promise((resolve) => setTimeout(resolve, 100));
        return { refunded: 30, balance: updated.balance as number, at: new Date(1_700_000_000_000) };
      });
    const results = await Promise.all(Array.from({ length: 30 }, refund));
    expect(runs).toBe(1);
    expect(await balanceOf(account)).toBe(970);
    for (const result of results) expect(result.value).toEqual({ refunded: 30, balance: 970, at: new Date(1_700_000_000_000) });
    expect(results.filter((result) => !result.replayed)).toHaveLength(1);
    // Replays are faithful copies: the Date comes back as a Date.
    expect(results.find((result) => result.replayed)!.value.at).toBeInstanceOf(Date);
  }, 60_000);

  it('a rollback leaves no record and no effect, so a retry runs cleanly', async () => {
    const account = uniqueName('acct');
    await prisma.account.create({ data: { id: account, balance: 100 } });
    const key = uniqueName('refund');
    const before = await records();
    await expect(
      runIdempotentTransaction(prisma, { key }, async (tx) => {
        await tx.account.update({ where: { id: account }, data: { balance: { decrement: 10 } } });
        throw new Error('provider said no');
      }),
    ).rejects.toThrow('provider said no');
    expect(await records()).toBe(before);
    expect(await balanceOf(account)).toBe(100);
    const retried = await executeIdempotentTransaction(prisma, { key }, async (tx) => {
      await tx.account.update({ where: { id: account }, data: { balance: { decrement: 10 } } });
      return 'refunded';
    });
    expect(retried).toEqual({ value: 'refunded', replayed: false });
    expect(await balanceOf(account)).toBe(90);
  });

  it('refuses the same key with another fingerprint, and replays the same one without running the work', async () => {
    const key = uniqueName('refund');
    await runIdempotentTransaction(prisma, { key, fingerprint: { amount: 1 } }, async () => 'one');
    await expect(runIdempotentTransaction(prisma, { key, fingerprint: { amount: 2 } }, async () => 'two')).rejects.toBeInstanceOf(
      IdempotencyFingerprintMismatchError,
    );
    const work = jest.fn(async () => 'again');
    expect(await executeIdempotentTransaction(prisma, { key, fingerprint: { amount: 1 } }, work)).toEqual({ value: 'one', replayed: true });
    expect(work).not.toHaveBeenCalled();
  });

  it('runs the work again once its stored result expired: the transaction takes the dead row over', async () => {
    const key = uniqueName('expiring');
    let runs = 0;
    const work = async () => ++runs;
    expect(await runIdempotentTransaction(prisma, { key, ttl: 1 }, work)).toBe(1);
    await waitUntil(async () => (await store.get(storageKeyOf('transaction', key))) === undefined, { what: 'the 1 ms retention' });
    // Still in the table (nothing purged it): taken over, then replayed.
    expect(await records()).toBeGreaterThan(0);
    expect(await runIdempotentTransaction(prisma, { key, ttl: 60_000 }, work)).toBe(2);
    expect(await runIdempotentTransaction(prisma, { key, ttl: 60_000 }, work)).toBe(2);
  });

  it('a nested call on the same client joins the outer transaction (a savepoint): both roll back together', async () => {
    const outerKey = uniqueName('outer');
    const innerKey = uniqueName('inner');
    const before = await records();
    await expect(
      runIdempotentTransaction(prisma, { key: outerKey }, async () => {
        await runIdempotentTransaction(prisma, { key: innerKey }, async () => 'inner');
        throw new Error('outer fails');
      }),
    ).rejects.toThrow('outer fails');
    expect(await records()).toBe(before);
  });

  describe('@Idempotent({ transactional: true }) with a PrismaIdempotencyStore', () => {
    let app: INestApplication;
    let runs = 0;
    const account = uniqueName('acct');

    @Controller()
    class RefundsController {
      @Post('refunds/:amount')
      @Idempotent({ transactional: true })
      async refund(@Param('amount') amount: string) {
        runs++;
        const tx = getIdempotentTransaction<TestPrismaClient>();
        const updated = await tx.account.update({ where: { id: account }, data: { balance: { decrement: Number(amount) } } });
        if (Number(amount) > 500) throw new Error('too much');
        return { refunded: Number(amount), balance: updated.balance };
      }
    }

    beforeAll(async () => {
      await prisma.account.create({ data: { id: account, balance: 1_000 } });
      @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })], controllers: [RefundsController] })
      class AppModule {}
      app = await NestFactory.create(AppModule, { logger: false });
      await app.init();
    });
    afterAll(async () => {
      await app?.close();
    });

    it('commits the handler writes with the record; a retry replays; a failing handler leaves nothing', async () => {
      const first = await request(app.getHttpServer()).post('/refunds/25').set('Idempotency-Key', 'http-1');
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ refunded: 25, balance: 975 });
      const retry = await request(app.getHttpServer()).post('/refunds/25').set('Idempotency-Key', 'http-1');
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(retry.body).toEqual(first.body);
      expect(runs).toBe(1);
      expect(await balanceOf(account)).toBe(975);

      const failed = await request(app.getHttpServer()).post('/refunds/600').set('Idempotency-Key', 'http-2');
      expect(failed.status).toBe(500);
      expect(await balanceOf(account)).toBe(975);
      const mismatch = await request(app.getHttpServer()).post('/refunds/30').set('Idempotency-Key', 'http-1');
      expect(mismatch.status).toBe(422);
    });
  });
});
