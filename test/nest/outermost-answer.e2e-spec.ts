import {
  Body,
  CallHandler,
  ClassSerializerInterceptor,
  Controller,
  ExecutionContext,
  Injectable,
  Module,
  NestInterceptor,
  Post,
  UseInterceptors,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Exclude, Expose } from 'class-transformer';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { RecordingStore } from '../fuzz/recording-store.js';

/**
 * The answer a replay sends is the one the first caller received, after the
 * application's own interceptors; nothing those interceptors hid reaches the store
 * (issue 24, item 1). Each interceptor is registered globally, on the controller and on
 * the route, on Express and on Fastify.
 */

class Account {
  id!: string;
  name!: string;
  @Exclude() passwordHash!: string;
  @Exclude() apiKey!: string;

  constructor(fields: Partial<Account>) {
    Object.assign(this, fields);
  }

  @Expose()
  get display(): string {
    return `${this.name} <${this.id}>`;
  }
}

const SECRETS = ['pbkdf2$secret-hash', 'sk_live_0123456789'];

/** A user's response-mapping interceptor: wraps the handler's value, stamped with how often it ran. */
@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  static runs = 0;
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(map((data: unknown) => ({ data, envelope: ++EnvelopeInterceptor.runs })));
  }
}

type Registration = 'global' | 'controller' | 'route';
type Platform = 'express' | 'fastify';

function buildApp(registration: Registration, interceptors: Type<NestInterceptor>[], store: RecordingStore, runs: { n: number }) {
  const onClass = registration === 'controller' ? UseInterceptors(...interceptors) : () => undefined;
  const onRoute = registration === 'route' ? UseInterceptors(...interceptors) : () => undefined;

  @Controller()
  @onClass
  class AccountsController {
    @Post('accounts')
    @onRoute
    @Idempotent()
    create(@Body() body: { name: string }) {
      runs.n++;
      return new Account({ id: `acct_${runs.n}`, name: body.name, passwordHash: SECRETS[0], apiKey: SECRETS[1] });
    }
  }

  @Module({
    imports: [IdempotencyModule.forRoot({ store })],
    controllers: [AccountsController],
    providers: registration === 'global' ? interceptors.map((useClass) => ({ provide: APP_INTERCEPTOR, useClass })) : [],
  })
  class AppModule {}
  return AppModule;
}

async function start(platform: Platform, module: Type<unknown>): Promise<INestApplication> {
  const app =
    platform === 'fastify'
      ? await NestFactory.create(module, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(module, { logger: false });
  await app.init();
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return app;
}

describe.each<Platform>(['express', 'fastify'])('the answer as the caller saw it (%s)', (platform) => {
  describe.each<Registration>(['global', 'controller', 'route'])('interceptors registered per %s', (registration) => {
    it('ClassSerializerInterceptor: the replay is the serialized answer byte for byte, and no @Exclude() field is stored', async () => {
      const store = new RecordingStore();
      const runs = { n: 0 };
      const app = await start(platform, buildApp(registration, [ClassSerializerInterceptor], store, runs));
      try {
        const send = () => request(app.getHttpServer()).post('/accounts').set('Idempotency-Key', 'acct-1').send({ name: 'Ada' });
        const first = await send();
        expect(first.status).toBe(201);
        expect(first.body).toEqual({ id: 'acct_1', name: 'Ada', display: 'Ada <acct_1>' });
        const replay = await send();
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.status).toBe(201);
        expect(replay.text).toBe(first.text);
        expect(replay.headers['content-type']).toBe(first.headers['content-type']);
        expect(runs.n).toBe(1);
        expect(store.results).toHaveLength(1);
        for (const secret of SECRETS) expect(store.results[0]).not.toContain(secret);
      } finally {
        await app.close();
      }
    });

    it('a response-mapping interceptor: the replay is its answer, not mapped a second time', async () => {
      EnvelopeInterceptor.runs = 0;
      const store = new RecordingStore();
      const runs = { n: 0 };
      const app = await start(platform, buildApp(registration, [ClassSerializerInterceptor, EnvelopeInterceptor], store, runs));
      try {
        const send = () => request(app.getHttpServer()).post('/accounts').set('Idempotency-Key', 'acct-2').send({ name: 'Grace' });
        const first = await send();
        expect(first.status).toBe(201);
        // Serialized inside the envelope (the serializer is the outer of the two) or
        // enveloped then serialized: either way no secret reaches the client.
        expect(first.body.envelope).toBe(1);
        for (const secret of SECRETS) expect(first.text).not.toContain(secret);
        const replay = await send();
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.text).toBe(first.text);
        expect(EnvelopeInterceptor.runs).toBe(1);
        expect(runs.n).toBe(1);
        for (const secret of SECRETS) expect(store.results[0]).not.toContain(secret);
      } finally {
        await app.close();
      }
    });
  });
});
