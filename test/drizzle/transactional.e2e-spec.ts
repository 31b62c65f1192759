import { randomUUID } from 'node:crypto';
import { Body, Controller, Injectable, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { eq, sql } from 'drizzle-orm';
import request from 'supertest';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { DrizzleIdempotencyStore, getIdempotentTransaction } from '../../lib/drizzle/index.js';
import { mariaLedger, pgLedger, type Ledger } from './refund-tables.js';

/**
 * `@Idempotent({ transactional: true })` with the Drizzle store: the handler's writes through
 * getIdempotentTransaction() and the record commit in one Drizzle transaction, so a failure
 * leaves neither and duplicates get the stored answer.
 */
describe.each([
  ['PostgreSQL', pgLedger],
  ['MariaDB', mariaLedger],
] as const)('@Idempotent({ transactional: true }) with DrizzleIdempotencyStore (%s)', (_name, makeLedger) => {
  let ledger: Ledger;
  let app: INestApplication;
  let handlerRuns = 0;
  let service: { post(id: string, accountId: number): Promise<{ id: string }> };

  beforeAll(async () => {
    ledger = await makeLedger(15);
    const { accounts, refunds } = ledger;

    @Controller('refunds')
    class RefundsController {
      @Post()
      @Idempotent({ transactional: true })
      async create(@Body() body: { accountId: number; amount: number; fail?: boolean }) {
        handlerRuns++;
        const tx = getIdempotentTransaction<Ledger['db']>();
        const messageId = randomUUID();
        await tx.insert(refunds).values({ messageId, accountId: body.accountId, amount: body.amount });
        await tx
          .update(accounts)
          .set({ balance: sql`${accounts.balance} - ${body.amount}` })
          .where(eq(accounts.id, body.accountId));
        if (body.fail) throw new Error('payment provider down');
        const [row] = await tx.select().from(accounts).where(eq(accounts.id, body.accountId));
        return { refunded: body.amount, balance: row.balance };
      }
    }

    @Injectable()
    class LedgerService {
      @Idempotent({ key: (id: string) => id, transactional: true })
      async post(id: string, accountId: number): Promise<{ id: string }> {
        const tx = getIdempotentTransaction<Ledger['db']>();
        await tx.insert(refunds).values({ messageId: id, accountId, amount: 1 });
        return { id };
      }
    }

    @Module({
      imports: [IdempotencyModule.forRoot({ logger: false, store: new DrizzleIdempotencyStore(ledger.db) })],
      controllers: [RefundsController],
      providers: [LedgerService],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
    service = app.get(LedgerService);
  });
  afterAll(async () => {
    await app?.close();
    await ledger?.destroy();
  });

  const post = (key: string, body: object) => request(app.getHttpServer()).post('/refunds').set('Idempotency-Key', key).send(body);

  it('applies concurrent duplicate requests once; every caller gets the answer, the duplicates marked replayed', async () => {
    const accountId = await ledger.newAccount(500);
    const key = randomUUID();
    const before = handlerRuns;
    const responses = await Promise.all(Array.from({ length: 10 }, () => post(key, { accountId, amount: 40 })));
    expect(handlerRuns - before).toBe(1);
    for (const response of responses) {
      expect(response.status).toBe(201);
      expect(response.body).toEqual({ refunded: 40, balance: 460 });
    }
    expect(responses.filter((response) => response.headers['idempotent-replayed'] === 'true')).toHaveLength(9);
    expect(await ledger.balanceOf(accountId)).toBe(460);
  });

  it('rolls the writes back with the record when the handler throws, so the retry runs once', async () => {
    const accountId = await ledger.newAccount(100);
    const key = randomUUID();
    const failed = await post(key, { accountId, amount: 30, fail: true });
    expect(failed.status).toBe(500);
    expect(await ledger.balanceOf(accountId)).toBe(100);
    const retried = await post(key, { accountId, amount: 30 });
    expect(retried.status).toBe(201);
    expect(retried.body).toEqual({ refunded: 30, balance: 70 });
    expect((await post(key, { accountId, amount: 30 })).headers['idempotent-replayed']).toBe('true');
    expect(await ledger.balanceOf(accountId)).toBe(70);
  });

  it('refuses the key with another body (422), changing nothing', async () => {
    const accountId = await ledger.newAccount(100);
    const key = randomUUID();
    expect((await post(key, { accountId, amount: 10 })).status).toBe(201);
    expect((await post(key, { accountId, amount: 11 })).status).toBe(422);
    expect(await ledger.balanceOf(accountId)).toBe(90);
  });

  it('runs a transactional provider method once per key', async () => {
    const accountId = await ledger.newAccount(0);
    const id = randomUUID();
    expect(await service.post(id, accountId)).toEqual({ id });
    expect(await service.post(id, accountId)).toEqual({ id });
    expect(await ledger.refundsOf(id)).toBe(1);
  });
});
