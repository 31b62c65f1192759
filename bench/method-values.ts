/**
 * The library's own CPU per call of an `@Idempotent({ key })` provider method (memory
 * store), for a JSON-clean value and for a value JSON cannot carry (Date, Map, bigint,
 * Buffer): what the faithful encoding of in-process replays costs, on replays and on
 * first executions. Without a Nest request in between, so the figure is the method
 * wrapper, the engine, the fingerprint of the arguments and the value encoding.
 *
 *   node -r ./test/support/ts-require.js bench/method-values.ts
 *   BENCH_LIB=/tmp/before/lib node -r ./test/support/ts-require.js bench/method-values.ts
 *
 * Prints the best of 7 batches of 20 000 calls each.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { describeLib, loadLib } from './lib.js';

const { Idempotent, IdempotencyModule, MemoryIdempotencyStore } = loadLib();
const BATCH = 20_000;
const BATCHES = 8;

interface Order {
  id: string;
  amount: number;
}

async function main(): Promise<void> {
  const store = new MemoryIdempotencyStore({ maxEntries: 4 * BATCH * BATCHES + 1_000 });

  @Injectable()
  class OrderService {
    @Idempotent({ key: (order: Order) => order.id, scope: 'bench-plain' })
    async plain(order: Order) {
      return { id: `ch_${order.id}`, amount: order.amount, status: 'succeeded', lines: [{ sku: 'a', qty: 1 }] };
    }

    @Idempotent({ key: (order: Order) => order.id, scope: 'bench-rich' })
    async rich(order: Order) {
      return {
        id: `ch_${order.id}`,
        amount: BigInt(order.amount),
        at: new Date(1_764_625_404_000),
        lines: new Map([['a', { qty: 1 }]]),
        receipt: Buffer.from('receipt'),
      };
    }
  }

  @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })], providers: [OrderService] })
  class LoopModule {}

  const app = await NestFactory.createApplicationContext(LoopModule, { logger: false });
  try {
    const service = app.get(OrderService);
    const order = (id: string): Order => ({ id, amount: 4200 });
    await service.plain(order('replayed'));
    await service.rich(order('replayed'));
    let next = 0;
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['plain value, replay', () => service.plain(order('replayed'))],
      ['plain value, first execution', () => service.plain(order(`p-${next++}`))],
    ];
    // A lib before the faithful encoding cannot replay this value (the bigint): measured only where it can.
    const richReplays = await service.rich(order('replayed')).then(
      () => true,
      (error: Error) => void console.log(`Date/Map/bigint/Buffer value: not replayable in this lib (${error.message.slice(0, 120)}...)`),
    );
    if (richReplays) {
      cases.push(
        ['Date/Map/bigint/Buffer value, replay', () => service.rich(order('replayed'))],
        ['Date/Map/bigint/Buffer value, first execution', () => service.rich(order(`r-${next++}`))],
      );
    }
    const best = new Map<string, number>();
    for (let batch = 0; batch < BATCHES; batch++) {
      for (const [name, call] of cases) {
        const startedAt = process.hrtime.bigint();
        for (let i = 0; i < BATCH; i++) await call();
        const micros = Number(process.hrtime.bigint() - startedAt) / BATCH / 1000;
        // The first batch warms the JIT up.
        if (batch > 0) best.set(name, Math.min(best.get(name) ?? Infinity, micros));
      }
    }
    console.log(`Library: ${describeLib()}`);
    for (const [name, micros] of best)
      console.log(`${name}: ${micros.toFixed(2)} µs per call (best of ${BATCHES - 1} batches of ${BATCH})`);
  } finally {
    await app.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
