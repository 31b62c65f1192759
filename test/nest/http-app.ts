import {
  Body,
  Controller,
  Get,
  HttpCode,
  HttpException,
  Module,
  Param,
  Post,
  Res,
  StreamableFile,
  type DynamicModule,
  type INestApplication,
} from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Readable } from 'node:stream';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { UserFromHeaderGuard } from '../support/user-from-header.guard.js';

export { Effects };

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function buildController(effects: Effects, hooks: Hooks) {
  @Controller()
  class PaymentsController {
    @Post('charges')
    @Idempotent()
    async charge(@Body() body: { amount: number }) {
      const n = effects.hit('charge');
      await (hooks.gate ?? sleep(hooks.slowMs));
      return { id: `ch_${n}`, amount: body.amount };
    }

    @Post('charges-wait')
    @Idempotent({ inFlight: 'wait' })
    async chargeWait(@Body() body: { amount: number }) {
      const n = effects.hit('chargeWait');
      await sleep(hooks.slowMs);
      return { id: `ch_${n}`, amount: body.amount };
    }

    @Post('other')
    @Idempotent()
    other() {
      return { n: effects.hit('other') };
    }

    @Post('text')
    @Idempotent()
    text() {
      return `plain text ${effects.hit('text')}`;
    }

    @Post('buffer')
    @Idempotent()
    buffer() {
      return Buffer.from([0, 1, 2, 255, effects.hit('buffer')]);
    }

    @Post('empty')
    @HttpCode(204)
    @Idempotent()
    empty(): void {
      effects.hit('empty');
    }

    @Post('accepted')
    @HttpCode(202)
    @Idempotent()
    accepted() {
      return { queued: effects.hit('accepted') };
    }

    @Post('custom-status/:id')
    @Idempotent()
    customStatus(@Param('id') id: string, @Res({ passthrough: true }) res: any) {
      const n = effects.hit('customStatus');
      if (typeof res.code === 'function' && res.raw) {
        res.code(209);
        res.header('Location', `/things/${id}/${n}`);
        res.header('Set-Cookie', `session=${n}`);
        res.header('X-Not-Replayed', String(n));
      } else {
        res.status(209);
        res.setHeader('Location', `/things/${id}/${n}`);
        res.setHeader('Set-Cookie', `session=${n}`);
        res.setHeader('X-Not-Replayed', String(n));
      }
      return { id, n };
    }

    @Post('null')
    @Idempotent()
    nothing() {
      effects.hit('null');
      return null;
    }

    @Post('fails')
    @Idempotent()
    fails() {
      const n = effects.hit('fails');
      if (hooks.failNext.value) throw new HttpException({ message: 'upstream failed', attempt: n }, 500);
      return { ok: n };
    }

    @Post('fails-cached')
    @Idempotent({ cacheErrors: (e) => e instanceof HttpException && e.getStatus() === 402 })
    failsCached() {
      const n = effects.hit('failsCached');
      throw new HttpException({ message: 'card declined', attempt: n }, 402);
    }

    @Post('big')
    @Idempotent({ maxResponseBytes: 1000 })
    big() {
      return { data: 'x'.repeat(5000), n: effects.hit('big') };
    }

    @Post('stream')
    @Idempotent()
    stream() {
      effects.hit('stream');
      return new StreamableFile(Readable.from([Buffer.from('streamed')]));
    }

    @Post('optional')
    @Idempotent({ required: false })
    optional() {
      return { n: effects.hit('optional') };
    }

    @Post('webhook')
    @Idempotent({ key: (ctx) => ctx.switchToHttp().getRequest().body?.eventId })
    webhook() {
      return { n: effects.hit('webhook') };
    }

    @Post('slow-lease')
    @Idempotent({ leaseTtl: 200 })
    async slowLease() {
      const n = effects.hit('slowLease');
      await sleep(800);
      return { n };
    }

    @Post('plain')
    plain() {
      return { n: effects.hit('plain') };
    }

    @Get('health')
    health() {
      return 'ok';
    }
  }
  return PaymentsController;
}

export type Platform = 'express' | 'fastify';

export interface Hooks {
  slowMs: number;
  failNext: { value: boolean };
  /** When set, /charges waits for it instead of sleeping: lets a test hold the first request open. */
  gate?: Promise<void>;
}

export async function createHttpApp(
  platform: Platform,
  options: {
    module?: IdempotencyModuleOptions;
    extraProviders?: any[];
    slowMs?: number;
    /** Runs before `init()`: middleware, global enhancers. */
    configure?: (app: INestApplication) => void;
  } = {},
): Promise<{ app: INestApplication; effects: Effects; hooks: Hooks }> {
  const effects = new Effects();
  const hooks: Hooks = { slowMs: options.slowMs ?? 100, failNext: { value: true } };
  const idempotency: DynamicModule = IdempotencyModule.forRoot({ ...options.module });
  @Module({
    imports: [idempotency],
    controllers: [buildController(effects, hooks)],
    providers: [{ provide: APP_GUARD, useClass: UserFromHeaderGuard }, ...(options.extraProviders ?? [])],
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  options.configure?.(app);
  await app.init();
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return { app, effects, hooks };
}
