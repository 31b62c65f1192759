import {
  Body,
  Controller,
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
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule, MemoryIdempotencyStore } from '../../lib/index.js';

/**
 * Where the application's interceptors surround an `@Idempotent()` handler,
 * IdempotencyInterceptor runs outside them for that handler (a replay is the first
 * caller's answer, not mapped by them again). When the application has global interceptors, it runs for decorated
 * handlers only: an undecorated route gets the application's interceptors and no
 * pipeline level of this library (on NestJS 11 a level costs every request an
 * `AsyncResource.bind()`; docs/performance.md, "What we learned").
 */
/** An application interceptor that maps every answer: stamps it with how often it ran. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  static handlers: string[] = [];
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const audited = AuditInterceptor.handlers.push(context.getHandler().name);
    return next.handle().pipe(map((answer: object) => ({ ...answer, audited })));
  }
}

type Registration = 'global' | 'controller';

function appModule(registration: Registration): Type<unknown> {
  const onClass = registration === 'controller' ? UseInterceptors(AuditInterceptor) : () => undefined;
  let orders = 0;

  @Controller()
  @onClass
  class OrdersController {
    @Post('orders')
    @Idempotent()
    create(@Body() body: { sku: string }) {
      return { id: `ord_${++orders}`, sku: body.sku };
    }
  }

  @Controller()
  class HealthController {
    @Post('health')
    health() {
      return { ok: true };
    }
  }

  @Module({
    imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
    controllers: [OrdersController, HealthController],
    providers: registration === 'global' ? [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }] : [],
  })
  class AppModule {}
  return AppModule;
}

describe.each<Registration>(['global', 'controller'])(
  'IdempotencyInterceptor placed outermost, application interceptor on the %s',
  (registration) => {
    let app: INestApplication;
    let framed: jest.SpyInstance;

    beforeAll(async () => {
      app = await NestFactory.create(appModule(registration), { logger: false });
      await app.init();
    });
    afterAll(() => app?.close());

    beforeEach(() => {
      AuditInterceptor.handlers = [];
      framed = jest.spyOn(IdempotencyInterceptor.prototype, 'intercept');
    });
    afterEach(() => framed.mockRestore());

    const handlersFramed = () => framed.mock.calls.map(([context]) => (context as ExecutionContext).getHandler().name);

    it('runs outside the application interceptor: a replay is the first answer, not mapped again', async () => {
      const send = () => request(app.getHttpServer()).post('/orders').set('Idempotency-Key', `o-${registration}`).send({ sku: 'A1' });
      const first = await send();
      const replay = await send();
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ id: 'ord_1', sku: 'A1', audited: 1 });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.text).toBe(first.text);
      expect(handlersFramed()).toEqual(['create', 'create']);
    });

    if (registration === 'global') {
      it('leaves an undecorated route to the application interceptor alone', async () => {
        const answer = await request(app.getHttpServer()).post('/health').send({});
        expect(answer.body).toEqual({ ok: true, audited: 1 });
        expect(handlersFramed()).toEqual([]);
      });
    } else {
      it('is the one global interceptor, on undecorated routes too (Nest shares class metadata between applications)', async () => {
        const answer = await request(app.getHttpServer()).post('/health').send({});
        expect(answer.body).toEqual({ ok: true });
        expect(handlersFramed()).toEqual(['health']);
      });
    }
  },
);

it('wraps the first usable global interceptor when the application registered an undefined one before it', async () => {
  @Controller()
  class OrdersController {
    @Post('orders')
    @Idempotent()
    create(@Body() body: { sku: string }) {
      return { id: 'ord_1', sku: body.sku };
    }

    @Post('health')
    health() {
      return { ok: true };
    }
  }
  @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [OrdersController] })
  class AppModule {}

  AuditInterceptor.handlers = [];
  const app = await NestFactory.create(AppModule, { logger: false });
  // Nest accepts it (an optional interceptor left out by configuration) and drops it.
  app.useGlobalInterceptors(undefined as unknown as NestInterceptor, new AuditInterceptor());
  await app.init();
  try {
    const send = () => request(app.getHttpServer()).post('/orders').set('Idempotency-Key', 'o-undefined').send({ sku: 'B2' });
    const first = await send();
    const replay = await send();
    expect(first.body).toEqual({ id: 'ord_1', sku: 'B2', audited: 1 });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    expect((await request(app.getHttpServer()).post('/health').send({})).body).toEqual({ ok: true, audited: 3 });
  } finally {
    await app.close();
  }
});
