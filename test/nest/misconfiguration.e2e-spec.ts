// Issue 43: a forgotten IdempotencyModule is refused at app.init(), and a configuration
// error found while serving a request is the server's to read: the client gets a generic
// 500 IDEMPOTENCY_CONFIGURATION_ERROR, the log gets the details, unless the application
// opts in with exposeConfigurationErrors.
import {
  Controller,
  Injectable,
  Module,
  Post,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';
import { IdempotencyTestingModule } from '../../lib/testing/index.js';
import { captureLogger } from '../support/capture-logger.js';

let seq = 0;
const newKey = () => `misconfiguration-${process.pid}-${Date.now()}-${++seq}`;

describe('a forgotten IdempotencyModule stops app.init()', () => {
  it('an HTTP app whose root module imports no IdempotencyModule: refused at init with the handler and the fix', async () => {
    @Controller('payments')
    class PaymentsController {
      @Post()
      @Idempotent()
      create() {
        return { id: 'pay_1' };
      }

      @Post('refunds')
      @Idempotent()
      refund() {
        return { id: 're_1' };
      }
    }
    @Module({ controllers: [PaymentsController] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    try {
      const init = app.init();
      await expect(init).rejects.toThrow(
        /@Idempotent\(\) on PaymentsController\.create, PaymentsController\.refund cannot find IdempotencyModule: the application imports none/,
      );
      await expect(init).rejects.toThrow(/Import IdempotencyModule\.forRoot\(\{ isGlobal: true \}\) in your root module/);
    } finally {
      await app.close();
    }
  });

  it('a provider method, in a testing module compiled and initialised without the module: refused at init', async () => {
    @Injectable()
    class Refunds {
      @Idempotent({ key: (id: string) => id })
      refund(id: string) {
        return { id };
      }
    }
    const moduleRef = await Test.createTestingModule({ providers: [Refunds] }).compile();
    try {
      await expect(moduleRef.init()).rejects.toThrow(/Refunds\.refund cannot find IdempotencyModule/);
    } finally {
      // NestJS 11's close() awaits the failed initialisation again and rethrows its error.
      await moduleRef.close().catch(() => undefined);
    }
  });

  it("with the module, or IdempotencyTestingModule, the class's own onApplicationBootstrap still runs, once", async () => {
    const booted: string[] = [];
    @Controller('orders')
    class OrdersController implements OnApplicationBootstrap {
      @Post()
      @Idempotent()
      create() {
        return { id: 'o_1' };
      }

      onApplicationBootstrap() {
        booted.push(this.constructor.name);
      }
    }
    for (const imports of [[IdempotencyModule.forRoot({ isGlobal: true })], [IdempotencyTestingModule.forRoot()]]) {
      const moduleRef = await Test.createTestingModule({ imports, controllers: [OrdersController] }).compile();
      const app = moduleRef.createNestApplication({ logger: false });
      await app.init();
      await app.close();
    }
    expect(booted).toEqual(['OrdersController', 'OrdersController']);
  });

  it('a class built outside Nest is not checked at boot: its call is refused as before, saying why', async () => {
    @Injectable()
    class Mailer {
      @Idempotent({ key: (to: string) => to })
      send(to: string) {
        return { to };
      }
    }
    await expect(new Mailer().send('a@example.com')).rejects.toThrow(/Mailer\.send cannot find IdempotencyModule/);
  });
});

/** Sets a user the scope cannot read (no id, sub, userId or _id): a configuration error found at the request. */
@Injectable()
class NamelessUserGuard implements CanActivate {
  canActivate(context: ExecutionContext) {
    context.switchToHttp().getRequest<{ user?: unknown }>().user = { displayName: 'Alice' };
    return true;
  }
}

describe.each(['express', 'fastify'] as const)('a configuration error at a request, on %s', (platform) => {
  let runs = 0;
  @Controller('transfers')
  class TransfersController {
    @Post()
    @Idempotent()
    create() {
      runs++;
      return { ok: true };
    }
  }

  async function appWith(options: IdempotencyModuleOptions, lines: string[]): Promise<INestApplication> {
    @Module({
      imports: [IdempotencyModule.forRoot({ isGlobal: true, logger: captureLogger(lines), ...options })],
      controllers: [TransfersController],
      providers: [{ provide: APP_GUARD, useClass: NamelessUserGuard }],
    })
    class AppModule {}
    const app =
      platform === 'fastify'
        ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
        : await NestFactory.create(AppModule, { logger: false });
    await app.init();
    if (platform === 'fastify') await app.getHttpAdapter().getInstance().ready();
    return app;
  }

  it('by default: a generic 500 problem body that keeps the code, the details (class, option, fix) in the log only', async () => {
    const lines: string[] = [];
    const app = await appWith({}, lines);
    try {
      const before = runs;
      const answer = await request(app.getHttpServer()).post('/transfers').set('Idempotency-Key', newKey());
      expect(answer.status).toBe(500);
      expect(answer.body).toEqual({
        type: 'urn:nestjs-idempotency:error:IDEMPOTENCY_CONFIGURATION_ERROR',
        title: 'Idempotency misconfigured',
        status: 500,
        code: 'IDEMPOTENCY_CONFIGURATION_ERROR',
        detail:
          'The server cannot serve this request idempotently: its idempotency configuration is wrong. The details are in the server log.',
        hint: 'The details are in the server log.',
      });
      for (const secret of ['TransfersController', 'scope', 'displayName', 'IdempotencyModule']) expect(answer.text).not.toContain(secret);
      expect(runs).toBe(before);
      // What the client was not told, the server's log says: where, and which option fixes it.
      const logged = lines.filter((line) => line.startsWith('error ') && line.includes('IDEMPOTENCY_CONFIGURATION_ERROR'));
      expect(logged).toHaveLength(1);
      expect(logged[0]).toContain('TransfersController.create');
      expect(logged[0]).toContain('scope');
    } finally {
      await app.close();
    }
  });

  it('exposeConfigurationErrors: true sends the details in the body as well', async () => {
    const lines: string[] = [];
    const app = await appWith({ exposeConfigurationErrors: true }, lines);
    try {
      const answer = await request(app.getHttpServer()).post('/transfers').set('Idempotency-Key', newKey());
      expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 500, code: 'IDEMPOTENCY_CONFIGURATION_ERROR' });
      expect(answer.body.detail).toContain('scope');
      expect(answer.body.detail).not.toBe(
        'The server cannot serve this request idempotently: its idempotency configuration is wrong. The details are in the server log.',
      );
      expect(lines.some((line) => line.includes('TransfersController.create'))).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('client errors keep explaining themselves: a request without a key is a 400 with its hint', async () => {
    const app = await appWith({}, []);
    try {
      const answer = await request(app.getHttpServer()).post('/transfers');
      expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
      expect(answer.body.hint).toMatch(/Idempotency-Key/);
    } finally {
      await app.close();
    }
  });
});

it('exposeConfigurationErrors must be true or false: anything else stops app.init()', async () => {
  @Module({ imports: [IdempotencyModule.forRoot({ exposeConfigurationErrors: 'yes' as unknown as boolean })] })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  try {
    await expect(app.init()).rejects.toThrow(/exposeConfigurationErrors must be true or false, got string/);
  } finally {
    await app.close();
  }
});
