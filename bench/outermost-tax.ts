/**
 * What an undecorated route pays for IdempotencyInterceptor being placed outermost
 * (`lib/nest/outermost-placement.ts`): app CPU per request of `POST /health`, a route
 * with no `@Idempotent()`, in three applications that also have an `@Idempotent()` route:
 *
 * - `none`: no interceptor anywhere (nothing is placed);
 * - `global`: a global no-op interceptor of the application's (`APP_INTERCEPTOR`);
 * - `controller`: a no-op interceptor on the `@Idempotent()` route's controller only.
 *
 * Each application in a process of its own, Express, 50 connections, rounds interleaved:
 *
 *   node -r ./test/support/ts-require.js bench/outermost-tax.ts [--rounds 5] [--duration 3]
 *   BENCH_LIB=/tmp/before/lib node -r ./test/support/ts-require.js bench/outermost-tax.ts
 *   BENCH_NEST11=1 node -r ./test/support/ts-require.js bench/outermost-tax.ts   # NestJS 11 (bench/nest-select.ts)
 */
import './nest-select.js';
import 'reflect-metadata';
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Body, Controller, Injectable, Module, Post, UseInterceptors, type CallHandler, type NestInterceptor } from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { numberArg } from './args.js';
import { describeLib, loadLib } from './lib.js';
import { cannon } from './run.js';
import { median, round } from './stats.js';

type Setup = 'none' | 'global' | 'controller';
const SETUPS: Setup[] = ['none', 'global', 'controller'];
const TS_REQUIRE = join(__dirname, '..', 'test', 'support', 'ts-require.js');

async function serve(setup: Setup): Promise<void> {
  const { Idempotent, IdempotencyModule, MemoryIdempotencyStore } = loadLib();

  @Injectable()
  class NoopInterceptor implements NestInterceptor {
    intercept(_context: unknown, next: CallHandler) {
      return next.handle();
    }
  }
  const onClass = setup === 'controller' ? UseInterceptors(NoopInterceptor) : () => undefined;

  @Controller()
  @onClass
  class OrdersController {
    @Post('orders')
    @Idempotent()
    create(@Body() body: unknown) {
      return { id: 'ord_1', body };
    }
  }

  @Controller()
  class HealthController {
    @Post('health')
    health(@Body() body: { amount: number }) {
      return { ok: true, amount: body.amount };
    }
  }

  @Module({
    imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
    controllers: [OrdersController, HealthController],
    providers: setup === 'global' ? [{ provide: APP_INTERCEPTOR, useClass: NoopInterceptor }] : [],
  })
  class AppModule {}

  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as { port: number };
  process.on('message', () => {
    const cpu = process.cpuUsage();
    process.send!({ cpu: cpu.user + cpu.system });
  });
  process.send!({ port });
}

class App {
  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
  ) {}

  static async start(setup: Setup): Promise<App> {
    const child = fork(__filename, ['serve', setup], { execArgv: ['-r', TS_REQUIRE], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (m: { port: number }) => resolve(m.port));
      child.once('exit', (code) => reject(new Error(`the ${setup} app exited (${code})`)));
    });
    return new App(child, port);
  }

  cpuMicros(): Promise<number> {
    return new Promise((resolve) => {
      this.child.once('message', (m: { cpu: number }) => resolve(m.cpu));
      this.child.send('cpu');
    });
  }

  stop(): void {
    this.child.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  const rounds = numberArg('rounds', 5);
  const duration = numberArg('duration', 3);
  const apps = new Map<Setup, App>();
  for (const setup of SETUPS) apps.set(setup, await App.start(setup));
  const perRequest = new Map<Setup, number[]>(SETUPS.map((s) => [s, []]));
  try {
    for (const app of apps.values()) await cannon(app.port, { path: '/health', key: undefined, duration: 1 }, 50);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? SETUPS : [...SETUPS].reverse();
      for (const setup of order) {
        const app = apps.get(setup)!;
        const before = await app.cpuMicros();
        const { result } = await cannon(app.port, { path: '/health', key: undefined, duration }, 50);
        await new Promise((r) => setTimeout(r, 100));
        perRequest.get(setup)!.push(((await app.cpuMicros()) - before) / result.requests.sent);
      }
    }
  } finally {
    for (const app of apps.values()) app.stop();
  }
  console.log(
    `${describeLib()}, NestJS ${nestVersion()}, Node ${process.version}, Express, ${rounds} rounds × ${duration} s, 50 connections`,
  );
  console.log('| application | app CPU µs per request of an undecorated route, median (min–max) | − none |');
  console.log('|---|--:|--:|');
  const none = median(perRequest.get('none')!);
  for (const setup of SETUPS) {
    const values = perRequest.get(setup)!;
    console.log(
      `| ${setup} | ${round(median(values), 1)} (${round(Math.min(...values), 1)}–${round(Math.max(...values), 1)}) | ${round(median(values) - none, 1)} |`,
    );
  }
}

function nestVersion(): string {
  return (require(require.resolve('@nestjs/core/package.json', { paths: [require.resolve('@nestjs/core')] })) as { version: string })
    .version;
}

if (process.argv[2] === 'serve') void serve(process.argv[3] as Setup);
else void main();
