import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';
import { CONFIGURATION, MISMATCH } from './conformance.js';
import { JsonMoney, Money, refusalOf, seen } from './in-process.js';

/**
 * Issue 41, item 7, on the two entry points that fingerprint a call's arguments:
 * `refund('rf_1', new Money(50000))` after `refund('rf_1', new Money(500))`, where Money
 * keeps its amount in `#cents`, returned the first call's result. The call is refused
 * before the handler runs (no record is claimed), with the fixes in its hint; a Money with
 * a toJSON() fingerprints as that, so another amount is the mismatch refusal.
 */

type Refund = (ref: string, amount: Money) => Promise<{ ref: string; run: number }>;

function entryPoints(): Array<{ name: string; setUp(): Promise<{ refund: Refund; runs(): number; close(): Promise<void> }> }> {
  return [
    {
      name: 'makeIdempotent(fn, { fingerprint: true })',
      async setUp() {
        let runs = 0;
        const refund = makeIdempotent(async (ref: string, _amount: Money) => ({ ref, run: ++runs }), {
          store: new MemoryIdempotencyStore(),
          key: (ref: string) => ref,
          scope: 'refund',
          fingerprint: true,
        });
        return { refund, runs: () => runs, close: async () => undefined };
      },
    },
    {
      name: '@Idempotent({ key }) on a provider method',
      async setUp() {
        let runs = 0;
        @Injectable()
        class RefundService {
          @Idempotent({ key: (ref: string) => ref })
          async refund(ref: string, _amount: Money) {
            return { ref, run: ++runs };
          }
        }
        @Module({
          imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false })],
          providers: [RefundService],
        })
        class AppModule {}
        const app: INestApplicationContext = await NestFactory.createApplicationContext(AppModule, { logger: false });
        await app.init();
        const service = app.get(RefundService);
        return { refund: (ref, amount) => service.refund(ref, amount), runs: () => runs, close: () => app.close() };
      },
    },
  ];
}

describe.each(entryPoints())('an argument with #private state: $name', ({ setUp }) => {
  let entry: Awaited<ReturnType<typeof setUp>>;
  beforeAll(async () => {
    entry = await setUp();
  });
  afterAll(() => entry.close());

  it('refuses Money with its amount in #cents, never answering 50000 with the answer for 500', async () => {
    const first = await seen(() => entry.refund('rf_1', new Money(500)));
    expect(refusalOf(first)).toBe(CONFIGURATION);
    expect((first as { error: { hint: string } }).error.hint).toMatch(/Give Money a toJSON\(\).*plain data.*fingerprint option/);
    const second = await seen(() => entry.refund('rf_1', new Money(50000)));
    expect(refusalOf(second)).toBe(CONFIGURATION);
    expect(entry.runs()).toBe(0);
  });

  it('fingerprints a Money with a toJSON() as that: another amount under the key is the mismatch refusal', async () => {
    const before = entry.runs();
    const first = await seen(() => entry.refund('rf_2', new JsonMoney(500)));
    expect(first).toEqual({ ok: true, value: { ref: 'rf_2', run: before + 1 } });
    expect(refusalOf(await seen(() => entry.refund('rf_2', new JsonMoney(50000))))).toBe(MISMATCH);
    expect(await seen(() => entry.refund('rf_2', new JsonMoney(500)))).toEqual(first);
    expect(entry.runs()).toBe(before + 1);
  });
});
