/**
 * The library's own CPU per request, without HTTP: an `@Idempotent()` route method of a
 * real Nest application (memory store) called in a loop through the method wrapper, as
 * Nest's router calls it, with a request and response shaped like Express's. Sockets,
 * the framework's routing and the load generator are left out, so the figure is steady
 * on a busy machine and shows what the library itself costs; the HTTP bench shows what
 * a request costs in an application.
 *
 *   npm run bench:loop                                     # about 30 s
 *   BENCH_LIB=/tmp/before/lib npm run bench:loop
 *   npm run bench:loop -- --batch 1000 --batches 2         # a smoke run
 *
 * Prints the best of 7 batches of 30 000 calls each (`--batches` 8: the first warms the
 * JIT up), for replays and first executions.
 */
import 'reflect-metadata';
import { Body, Controller, HttpCode, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import { numberFlags, parseFlags } from './args.js';
import { runMain } from './harness.js';
import { describeLib, loadLib } from './lib.js';

const { Idempotent, IdempotencyModule, MemoryIdempotencyStore } = loadLib();
const options = { batch: 30_000, batches: 8 };
parseFlags(process.argv.slice(2), numberFlags(options, ['batch', 'batches']));
const { batch: BATCH, batches: BATCHES } = options;

interface ChargeBody {
  amount: number;
}

async function main(): Promise<void> {
  // Room for every first execution of the run: evictions would add work a real store does not do.
  const store = new MemoryIdempotencyStore({ maxEntries: BATCH * BATCHES + 1_000 });
  let charges = 0;

  @Controller()
  class ChargesController {
    @Post('charges')
    @HttpCode(201)
    @Idempotent({ store, ttl: 10 * 60 * 1000 })
    charge(@Body() body: ChargeBody) {
      return { id: `ch_${++charges}`, amount: body.amount, status: 'succeeded' };
    }
  }

  @Module({ imports: [IdempotencyModule.forRoot({})], controllers: [ChargesController] })
  class LoopModule {}

  const app: INestApplication = await NestFactory.create(LoopModule, { logger: false });
  await app.init();
  try {
    const controller = app.get(ChargesController) as unknown as {
      charge(body: ChargeBody, context: ExecutionContextHost): Promise<unknown>;
    };
    const body = { amount: 4200, currency: 'eur', customer: 'cus_123', description: 'bench order' };
    const contextFor = (key: string) => {
      const request = {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        params: {},
        query: {},
        body,
        url: '/charges',
        route: { path: '/charges' },
      };
      const headers: Record<string, unknown> = {};
      const response = {
        statusCode: 201,
        headersSent: false,
        setHeader: (name: string, value: unknown) => void (headers[name] = value),
        getHeaders: () => headers,
        status(code: number) {
          this.statusCode = code;
          return this;
        },
      };
      return new ExecutionContextHost([request, response, () => undefined], ChargesController, ChargesController.prototype.charge);
    };
    await controller.charge(body, contextFor('replayed-key'));
    let next = 0;
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['replay', () => controller.charge(body, contextFor('replayed-key'))],
      ['first execution', () => controller.charge(body, contextFor(`key-${next++}`))],
    ];
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

runMain(main);
