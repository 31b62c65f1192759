import { Controller, Injectable, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { Observable, from, mergeAll } from 'rxjs';
import {
  Idempotent,
  IdempotencyInterceptor,
  IdempotencyModule,
  IdempotencyService,
  IdempotencyStore,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
} from '../../lib/index.js';
import { storageKeyOf } from '../../lib/core/index.js';
import { scopeOf } from '../../lib/nest/index.js';
import { IdempotencyTestingModule } from '../../lib/testing/index.js';
import { captureLogger } from '../support/capture-logger.js';

@Injectable()
class StoreConfig {
  readonly store = new MemoryIdempotencyStore({ maxEntries: 50 });
}
@Module({ providers: [StoreConfig], exports: [StoreConfig] })
class ConfigModule {}

let runs = 0;

@Controller()
class CounterController {
  @Post('count')
  @Idempotent()
  count() {
    return { runs: ++runs };
  }
}

describe('IdempotencyModule', () => {
  afterEach(() => (runs = 0));

  it('forRootAsync builds its options from injected providers', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRootAsync({
          imports: [ConfigModule],
          inject: [StoreConfig],
          useFactory: (config: StoreConfig) => ({ store: config.store, ttl: 1234, leaseTtl: 1000 }),
        }),
      ],
      controllers: [CounterController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      const service = app.get(IdempotencyService);
      expect(service.store).toBe(app.get(StoreConfig).store);
      expect(app.get(IdempotencyStore)).toBe(service.store);
      await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'a').expect(201);
      const replay = await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'a').expect(201);
      expect(replay.body).toEqual({ runs: 1 });
      const record = await service.inspect('a', { operation: 'POST /count' });
      expect(record).toMatchObject({ status: 'completed' });
      expect(record!.status === 'completed' && record!.expiresAt - Date.now()).toBeLessThanOrEqual(1234);
      expect(await service.forget('a', { operation: 'POST /count' })).toBe(true);
      const again = await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'a').expect(201);
      expect(again.body).toEqual({ runs: 2 });
    } finally {
      await app.close();
    }
  });

  it('isGlobal makes @Idempotent work in feature modules that do not import it', async () => {
    @Module({ controllers: [CounterController] })
    class FeatureModule {}
    @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true }), FeatureModule] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
    try {
      await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'g').expect(201);
      const replay = await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'g');
      expect(replay.headers['idempotent-replayed']).toBe('true');
    } finally {
      await app.close();
    }
  });

  it('explains how to fix a missing IdempotencyModule: app.init() refuses; a call that still gets through logs the fix and answers a generic 500', async () => {
    @Module({ controllers: [CounterController] })
    class AppModule {}
    const logged: string[] = [];
    const app = await NestFactory.create(AppModule, { logger: captureLogger(logged) });
    try {
      await expect(app.init()).rejects.toThrow(
        /@Idempotent\(\) on CounterController\.count cannot find IdempotencyModule.*IdempotencyModule\.forRoot\(\{ isGlobal: true \}\)/,
      );
      expect(runs).toBe(0);
    } finally {
      await app.close();
    }
    // An interceptor used without the module (no boot check reached it): refused, the fix logged, not answered.
    const interceptor = new IdempotencyInterceptor(new (require('@nestjs/core').Reflector)());
    const res = { statusCode: 201, getHeaders: () => ({}), setHeader() {}, status() {} };
    const context: any = {
      getHandler: () => CounterController.prototype.count,
      getClass: () => CounterController,
      getType: () => 'http',
      switchToHttp: () => ({ getRequest: () => ({ headers: {} }), getResponse: () => res }),
    };
    const error = await new Promise<any>((resolve) =>
      interceptor.intercept(context, { handle: () => new Observable() }).subscribe({ error: resolve }),
    );
    expect(error.getStatus()).toBe(500);
    expect(error.getResponse()).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', hint: 'The details are in the server log.' });
    expect(JSON.stringify(error.getResponse())).not.toMatch(/CounterController|forRoot/);
    expect(
      logged.some((line) =>
        /error Idempotency .*IDEMPOTENCY_CONFIGURATION_ERROR.*CounterController\.count.*IdempotencyModule\.forRoot\(\{ isGlobal: true \}\)/.test(
          line,
        ),
      ),
    ).toBe(true);
  });

  it('IdempotencyTestingModule turns @Idempotent into a pass-through for unit tests', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyTestingModule.forRoot()],
      controllers: [CounterController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      await request(app.getHttpServer()).post('/count').expect(201);
      const second = await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'same');
      const third = await request(app.getHttpServer()).post('/count').set('Idempotency-Key', 'same');
      expect(third.body).toEqual({ runs: 3 });
      expect(second.headers['idempotent-replayed']).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it('rejects a nonsensical option with a hint', async () => {
    @Controller()
    class BadController {
      @Post('bad')
      @Idempotent({ ttl: -5 })
      bad() {
        return 1;
      }
    }
    const events: IdempotencyEvent[] = [];
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ onEvent: (e) => events.push(e) })],
      controllers: [BadController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      await expect(app.init()).rejects.toThrow(/BadController\.bad: ttl must be a whole number of milliseconds above 0, got -5/);
      expect(events).toEqual([]);
    } finally {
      await app.close();
    }
  });
});

describe('cancellation', () => {
  let subscribed = 0;
  let tornDown = 0;
  @Controller()
  class StreamController {
    @Post('stream')
    @Idempotent()
    stream() {
      // Never ends: only its caller going away ends it.
      return new Observable(() => {
        subscribed++;
        return () => tornDown++;
      });
    }
  }

  it('does not release the key when the caller unsubscribes before the handler finishes', async () => {
    const store = new MemoryIdempotencyStore();
    const events: IdempotencyEvent[] = [];
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, onEvent: (e) => events.push(e) })],
      controllers: [StreamController],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    await app.init();
    try {
      const interceptor = app.get(IdempotencyInterceptor);
      const controller = app.get(StreamController) as unknown as { stream(context: unknown): unknown };
      const res = { statusCode: 201, getHeaders: () => ({}), setHeader() {}, status() {} };
      const contextFor = (key: string): any => {
        const req = { method: 'POST', headers: { 'idempotency-key': key }, params: {}, body: {} };
        const args = [req, res];
        return {
          getHandler: () => StreamController.prototype.stream,
          getClass: () => StreamController,
          getType: () => 'http',
          getArgs: () => args,
          getArgByIndex: (i: number) => args[i],
          switchToHttp: () => ({ getRequest: () => req, getResponse: () => res }),
        };
      };
      // Nest's chain inside the interceptor: the @Idempotent() wrapper, handed its context.
      const chain = (context: unknown) => ({
        handle: () => from(Promise.resolve(controller.stream(context) as Observable<unknown>)).pipe(mergeAll()),
      });
      const until = async (done: () => boolean) => {
        for (const deadline = Date.now() + 5000; !done();) {
          if (Date.now() > deadline) throw new Error('timed out');
          await new Promise((r) => setTimeout(r, 5));
        }
      };

      const first = contextFor('cancel-me');
      const subscription = interceptor.intercept(first, chain(first)).subscribe();
      await until(() => subscribed === 1);
      subscription.unsubscribe();
      expect(tornDown).toBe(1);
      expect(events.map((e) => e.type)).toEqual(['claimed', 'abandoned']);
      const key = storageKeyOf(scopeOf('POST /stream'), 'cancel-me');
      expect(await store.get(key)).toMatchObject({ status: 'in_progress' });
      // A retry while the lease lasts is refused, not run.
      const retryContext = contextFor('cancel-me');
      const retry = await new Promise<unknown>((resolve) =>
        interceptor.intercept(retryContext, chain(retryContext)).subscribe({ error: resolve, next: resolve }),
      );
      expect((retry as { getStatus(): number }).getStatus()).toBe(409);
      expect(subscribed).toBe(1);

      // Unsubscribed before the claim even resolved: the handler never runs, and the
      // claimed lease is abandoned (its renewal stops) rather than left renewing forever.
      events.length = 0;
      const early = contextFor('gone-early');
      interceptor.intercept(early, chain(early)).subscribe().unsubscribe();
      await until(() => events.length >= 2);
      expect(subscribed).toBe(1);
      expect(events.map((e) => e.type)).toEqual(['claimed', 'abandoned']);
    } finally {
      await app.close();
    }
  });
});
