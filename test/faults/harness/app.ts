/**
 * The application of the fault suites, in the test's own process (a real Nest HTTP app on
 * a free port, several of them over one store to stand for several instances): one
 * `@Idempotent()` route, `POST /work`, whose effect the invariant checker counts. In
 * process, not spawned like test/reliability/harness/app.ts, so a suite pays no process
 * start-up and stays seconds long on 2 cores; the store path still goes through a socket
 * (the fault proxy), which is where the faults are.
 *
 * Same request protocol as the reliability harness (its client and load driver drive it):
 * `x-fail: 1` throws (502) before the effect, `x-delay-ms: n` sleeps n ms before it.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Body, Controller, Headers, HttpException, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule, type IdempotencyStore } from '../../../lib/index.js';
import type { Effect } from '../../reliability/harness/invariant.js';
import { trace, tracedStore } from './trace.js';

/** One instance's store, and how its effect is written (by default, in the shared in-memory log). */
export interface FaultBackend {
  readonly store: IdempotencyStore;
  /** Writes the effect in the handler's idempotent transaction (transactional mode). */
  readonly recordEffect?: (effect: Effect) => Promise<void>;
  close(): Promise<void>;
}

export interface FaultApp {
  readonly name: string;
  readonly port: number;
  /** Keys whose handler started, in order (a handler that ran, even if its effect failed). */
  readonly started: string[];
  close(): Promise<void>;
}

export interface FaultAppOptions {
  readonly leaseTtl: number;
  readonly transactional?: boolean;
  /** Effects of the non-transactional handlers, shared by every instance. */
  readonly effects: Effect[];
  /** Every `store_error` event's message, for the failure messages and the figures. */
  readonly storeErrors: string[];
  /**
   * Keys (as the store sees them) of every `lease_lost` event: a lease that ran out before
   * its result was written, after which a retry may run the handler again (documented).
   */
  readonly leaseLost?: string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function startFaultApp(name: string, backend: FaultBackend, options: FaultAppOptions): Promise<FaultApp> {
  const started: string[] = [];
  const recordEffect = options.transactional
    ? backend.recordEffect!
    : async (effect: Effect) => {
        options.effects.push(effect);
      };

  @Controller()
  class WorkController {
    @Post('work')
    @Idempotent({ leaseTtl: options.leaseTtl, inFlight: 'reject', transactional: options.transactional ?? false })
    async work(
      @Body() body: { payload?: unknown },
      @Headers('idempotency-key') key: string,
      @Headers('x-fail') fail?: string,
      @Headers('x-delay-ms') delay?: string,
    ) {
      started.push(key);
      trace({ app: name, op: 'handler', key, start: Date.now() });
      if (fail === '1') throw new HttpException({ message: 'injected failure' }, 502);
      const delayMs = Number(delay ?? 0);
      if (delayMs > 0) await sleep(delayMs);
      const effectId = randomUUID();
      await recordEffect({ key, effectId, app: name, pid: process.pid });
      trace({ app: name, op: 'effect', key, effectId, start: Date.now() });
      return { key, effectId, app: name, payload: body.payload ?? null };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: tracedStore(name, backend.store),
        leaseTtl: options.leaseTtl,
        onEvent: (event) => {
          trace({ app: name, op: 'event', type: event.type, key: event.key, start: Date.now() });
          if (event.type === 'lease_lost') options.leaseLost?.push(`${name}: ${event.key}`);
          if (event.type === 'store_error') options.storeErrors.push(`${name}: ${String((event.error as Error)?.message ?? event.error)}`);
        },
      }),
    ],
    controllers: [WorkController],
  })
  class FaultAppModule {}

  const app: INestApplication = await NestFactory.create(FaultAppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const port = (app.getHttpServer().address() as { port: number }).port;
  return {
    name,
    port,
    started,
    async close() {
      await app.close();
      await backend.close();
    },
  };
}
