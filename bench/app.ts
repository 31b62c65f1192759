/**
 * The application under load, run in a child process of bench/run.ts so that the load
 * generator never shares an event loop with it:
 *
 *   node -r ./test/support/ts-require.js bench/app.ts   (forked with an IPC channel)
 *
 * One POST handler, mounted bare and once per store under `@Idempotent`. The parent
 * asks for store call counts over IPC before and after every run.
 */
import 'reflect-metadata';
import {
  Body,
  Controller,
  HttpCode,
  Injectable,
  Module,
  Post,
  UseInterceptors,
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';
import type { Observable } from 'rxjs';
import { NestFactory } from '@nestjs/core';
import { serveParent } from './harness.js';
import { loadLib } from './lib.js';
import { FloorInterceptor, type FloorName } from './floors.js';
import { openStores, type BenchStore, type StoreName } from './stores.js';

export interface AppConfig {
  platform: 'express' | 'fastify';
  stores: StoreName[];
  /** How long the in-flight conflict handler runs, ms. */
  slowMs: number;
  runId: string;
  autoPipelining: boolean;
  redisUrl?: string;
  postgresUrl?: string;
  mariadbUrl?: string;
}

export type ParentMessage =
  | { id: number; type: 'counts' }
  | { id: number; type: 'close' }
  /** Starts the V8 CPU profiler in the app (bench/profile-diff.ts), sampling every `intervalMicros`. */
  | { id: number; type: 'profile-start'; intervalMicros: number }
  /** Stops it and writes the profile (`.cpuprofile` JSON) to `file`. */
  | { id: number; type: 'profile-stop'; file: string };
export type ChildMessage =
  | { type: 'ready'; port: number; stores: StoreName[]; floors: FloorName[] }
  | { type: 'failed'; error: string }
  | {
      id: number;
      type: 'counts';
      counts: Partial<Record<StoreName, { calls: Record<string, number>; backend: number }>>;
      rss: number;
      /** CPU time this process has used (user + system), µs: per-request CPU survives a busy machine better than req/s. */
      cpuMicros: number;
    }
  | { id: number; type: 'closed' }
  | { id: number; type: 'profiled' };

const { Idempotent, IdempotencyModule } = loadLib();

/** Retention of bench records: long enough for one bench, short enough not to litter a shared Redis. */
export const TTL = 10 * 60 * 1000;

export interface ChargeBody {
  amount: number;
}

/** The handler every variant shares (bench/peers/app.ts too): a little real work, a small JSON answer. */
export function charge(body: ChargeBody, counter: { n: number }): { id: string; amount: number; status: string } {
  return { id: `ch_${++counter.n}`, amount: body.amount, status: 'succeeded' };
}

/** Does nothing: the price of having any interceptor at all on a Nest route. */
@Injectable()
class NoopInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle();
  }
}

function buildControllers(stores: BenchStore[], slowMs: number): Type<unknown>[] {
  const counter = { n: 0 };
  const sleep = () => new Promise((resolve) => setTimeout(resolve, slowMs));

  @Controller()
  class BareController {
    @Post('bare')
    @HttpCode(201)
    bare(@Body() body: ChargeBody) {
      return charge(body, counter);
    }

    @Post('interceptor')
    @HttpCode(201)
    @UseInterceptors(NoopInterceptor)
    withInterceptor(@Body() body: ChargeBody) {
      return charge(body, counter);
    }
  }

  const controllers: Type<unknown>[] = [BareController];
  // One controller per store: @Idempotent options (the store) are per handler. Each
  // store's floor is registered right after it: Express matches routes in registration
  // order (~0.2 µs per route passed), so a floor registered after every store would pay
  // a few µs per request more than the library route it is compared with.
  for (const { name, store, floor } of stores) {
    @Controller(name)
    class StoreController {
      @Post('first')
      @Idempotent({ store, ttl: TTL })
      first(@Body() body: ChargeBody) {
        return charge(body, counter);
      }

      @Post('slow')
      @Idempotent({ store, ttl: TTL })
      async slow(@Body() body: ChargeBody) {
        await sleep();
        return charge(body, counter);
      }
    }
    Object.defineProperty(StoreController, 'name', { value: `${name[0].toUpperCase()}${name.slice(1)}Controller` });
    controllers.push(StoreController);
    if (floor) controllers.push(floorController(floor, counter));
  }
  return controllers;
}

/** A floor (bench/floors.ts): the same handler, made idempotent by hand on the same client or pool. */
function floorController(floor: NonNullable<BenchStore['floor']>, counter: { n: number }): Type<unknown> {
  @Controller(floor.name)
  class FloorController {
    @Post('first')
    @HttpCode(201)
    @UseInterceptors(new FloorInterceptor(floor.backend, TTL))
    first(@Body() body: ChargeBody) {
      return charge(body, counter);
    }
  }
  Object.defineProperty(FloorController, 'name', {
    value: `${floor.name.replace(/-(.)/g, (_, c: string) => c.toUpperCase())}Controller`,
  });
  return FloorController;
}

async function start(config: AppConfig): Promise<{ app: INestApplication; stores: BenchStore[] }> {
  const stores = await openStores(config.stores, {
    runId: config.runId,
    autoPipelining: config.autoPipelining,
    redisUrl: config.redisUrl,
    postgresUrl: config.postgresUrl,
    mariadbUrl: config.mariadbUrl,
  });
  @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true })], controllers: buildControllers(stores, config.slowMs) })
  class BenchModule {}
  return { app: await listen(BenchModule, config.platform), stores };
}

/** The app of `module` on `platform`, listening on a free port of 127.0.0.1. */
export async function listen(module: Type<unknown>, platform: AppConfig['platform']): Promise<INestApplication> {
  const app =
    platform === 'fastify'
      ? await NestFactory.create(module, new (await import('@nestjs/platform-fastify')).FastifyAdapter() as never, { logger: false })
      : await NestFactory.create(module, { logger: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

let profilerSession: import('node:inspector').Session | undefined;

/** The V8 profiler over the inspector protocol, so that a profile covers only the window the parent asks for. */
async function profiler(message: Extract<ParentMessage, { type: 'profile-start' | 'profile-stop' }>): Promise<void> {
  const { Session } = await import('node:inspector');
  const session = (profilerSession ??= new Session());
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params ?? {}, (error, result) => (error ? reject(error) : resolve(result))),
    );
  if (message.type === 'profile-start') {
    session.connect();
    await post('Profiler.enable');
    await post('Profiler.setSamplingInterval', { interval: message.intervalMicros });
    await post('Profiler.start');
    return;
  }
  const { profile } = (await post('Profiler.stop')) as { profile: unknown };
  session.disconnect();
  const { writeFileSync } = await import('node:fs');
  writeFileSync(message.file, JSON.stringify(profile));
}

if (require.main === module) {
  serveParent<ParentMessage>(async () => {
    const { app, stores } = await start(JSON.parse(process.env.BENCH_APP_CONFIG ?? '{}') as AppConfig);
    return {
      ready: {
        port: (app.getHttpServer().address() as { port: number }).port,
        stores: stores.map((s) => s.name),
        floors: stores.flatMap((s) => (s.floor ? [s.floor.name] : [])),
      },
      answer: async (message) => {
        if (message.type === 'profile-start' || message.type === 'profile-stop') {
          await profiler(message);
          return { type: 'profiled' };
        }
        const counts: Record<string, { calls: Record<string, number>; backend: number }> = {};
        for (const s of stores) counts[s.name] = { calls: { ...s.store.counts }, backend: s.backendCalls() };
        const cpu = process.cpuUsage();
        return { type: 'counts', counts, rss: process.memoryUsage().rss, cpuMicros: cpu.user + cpu.system };
      },
      close: async () => {
        await app.close();
        for (const s of stores) await s.close().catch(() => undefined);
      },
    };
  });
}
