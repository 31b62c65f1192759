import { Body, Controller, Module, Post, UnprocessableEntityException, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import request from 'supertest';
import {
  Idempotent,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
  makeIdempotent,
  type IdempotencyRecord,
} from '../../lib/index.js';
import { deserializeOutcome } from '../../lib/core/index.js';

/**
 * Issue 26: `inspect()` gave `result` as the store's encoded string. It now also gives
 * `response`, the stored answer decoded as a duplicate gets it.
 */

let runs = 0;

@Controller('refunds')
class RefundsController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    return { refunded: body.amount, run: ++runs };
  }

  @Post('declined')
  @Idempotent({ cacheErrors: [UnprocessableEntityException] })
  decline() {
    runs++;
    throw new UnprocessableEntityException({ code: 'card_declined', message: 'The card was declined' });
  }
}

class DeclinedError extends Error {
  readonly code = 'card_declined';
  constructor() {
    super('declined by the bank');
    this.name = 'DeclinedError';
  }
}

const store = new MemoryIdempotencyStore();
let app: INestApplication;
let service: IdempotencyService;

beforeAll(async () => {
  @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })], controllers: [RefundsController] })
  class AppModule {}
  app = await NestFactory.create(AppModule, { logger: false });
  await app.init();
  service = app.get(IdempotencyService);
});
afterAll(() => app?.close());

/** The record's encoded `result` is still there, as the store holds it. */
function expectRawResult(record: IdempotencyRecord | undefined): void {
  expect(record?.status === 'completed' && typeof record.result).toBe('string');
  if (record?.status === 'completed') expect(() => deserializeOutcome(record.result)).not.toThrow();
}

describe('IdempotencyService.inspect() decodes the stored answer as response', () => {
  it("an HTTP route's record: the body the client received, with its status", async () => {
    const first = await request(app.getHttpServer()).post('/refunds').set('Idempotency-Key', 'http-1').send({ amount: 7 }).expect(201);
    const record = await service.inspect('http-1', { operation: 'POST /refunds' });
    expect(record).toMatchObject({ status: 'completed', response: { kind: 'value', value: first.body, status: 201 } });
    expect(first.body).toEqual({ refunded: 7, run: runs });
    expectRawResult(record);
    // What decodeResult reads, as before.
    expect(record?.status === 'completed' && record.response).toEqual(service.decodeResult(record!));
  });

  it("an HTTP route's cached error: the problem body and status a duplicate gets", async () => {
    const first = await request(app.getHttpServer()).post('/refunds/declined').set('Idempotency-Key', 'http-2').expect(422);
    const record = await service.inspect('http-2', { operation: 'POST /refunds/declined' });
    expect(record).toMatchObject({
      status: 'completed',
      response: { kind: 'error', name: 'UnprocessableEntityException', body: first.body, status: 422 },
    });
    expect(first.body).toMatchObject({ code: 'card_declined' });
    expectRawResult(record);
  });

  it("a makeIdempotent function's record: a faithful copy (Date, Map, bigint come back as themselves)", async () => {
    const value = { at: new Date(7), totals: new Map([['eur', 12n]]), ids: new Set([1, 2]), note: undefined };
    const refund = makeIdempotent(async (id: string) => ({ ...value, id }), { store, key: (id) => id, scope: 'inspect-values' });
    await refund('fn-1');
    const record = await service.inspect('fn-1', { operation: 'fn:inspect-values' });
    expect(record?.status).toBe('completed');
    if (record?.status !== 'completed') return;
    expect(record.response).toEqual({ kind: 'value', value: { ...value, id: 'fn-1' } });
    const decoded = (record.response as { value: typeof value }).value;
    expect(decoded.at).toBeInstanceOf(Date);
    expect(decoded.totals.get('eur')).toBe(12n);
    expect('note' in decoded).toBe(true);
    expectRawResult(record);
  });

  it('a run() record, an error outcome stored by cacheErrors, and a result too large to store', async () => {
    await service.run('run-1', () => ({ at: new Date(9), big: 2n ** 70n }), { scope: 'inspect' });
    expect(await service.inspect('run-1', { operation: 'run:inspect' })).toMatchObject({
      response: { kind: 'value', value: { at: new Date(9), big: 2n ** 70n } },
    });

    const decline = makeIdempotent(
      async (_id: string): Promise<never> => {
        throw new DeclinedError();
      },
      { store, key: (id) => id, scope: 'inspect-errors', cacheErrors: [DeclinedError] },
    );
    await expect(decline('fn-2')).rejects.toThrow(DeclinedError);
    expect(await service.inspect('fn-2', { operation: 'fn:inspect-errors' })).toMatchObject({
      status: 'completed',
      response: { kind: 'error', name: 'DeclinedError', message: 'declined by the bank' },
    });

    const big = makeIdempotent(async (_id: string) => 'x'.repeat(500), {
      store,
      key: (id) => id,
      scope: 'inspect-big',
      maxResponseBytes: 100,
    });
    await big('fn-3');
    expect(await service.inspect('fn-3', { operation: 'fn:inspect-big' })).toMatchObject({
      response: { kind: 'unstorable', reason: expect.stringMatching(/over maxResponseBytes \(100\)/) },
    });
  });

  it('a running record has no response; none is undefined', async () => {
    let finish!: () => void;
    const running = service.run('run-2', () => new Promise<void>((resolve) => (finish = resolve)), { scope: 'inspect' });
    for (let i = 0; i < 200 && finish === undefined; i++) await new Promise((resolve) => setImmediate(resolve));
    const record = await service.inspect('run-2', { operation: 'run:inspect' });
    expect(record?.status).toBe('in_progress');
    expect(record && 'response' in record).toBe(false);
    finish();
    await running;
    expect(await service.inspect('never-used', { operation: 'run:inspect' })).toBeUndefined();
  });
});
