import {
  BadRequestException,
  Catch,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  UseFilters,
  type ArgumentsHost,
  type CallHandler,
  type ExceptionFilter,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
  type Provider,
  type Type,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, BaseExceptionFilter, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { catchError, throwError, type Observable } from 'rxjs';
import request from 'supertest';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, type CompleteRequest } from '../../lib/index.js';
import { Effects } from '../support/effects.js';

/*
 * A cached error (`cacheErrors`) replays through the application's exception filters as
 * the first caller got it (issue 41, item 6): a global filter answering a domain error
 * with 402, a filter catching an HttpException subclass, a filter scoped on the
 * controller, a catch-all `BaseExceptionFilter` subclass, Nest's default handling; on
 * Express and Fastify, with and without a global interceptor around the handler; and
 * records written by 0.6.x (`props: { body }`, no class chain) still replay as then.
 */

type Platform = 'express' | 'fastify';

class CardDeclinedError extends Error {
  constructor(readonly declineCode: string) {
    super('card declined');
    this.name = 'CardDeclinedError';
  }
}

class QuotaError extends Error {
  readonly limit = 3;
}

class UnmappedError extends Error {}

class PaymentRequired extends HttpException {
  constructor(reason: string) {
    super({ reason }, 402);
  }
}

interface ReplyLike {
  status(code: number): ReplyLike;
  header?(name: string, value: string): ReplyLike;
  setHeader?(name: string, value: string): void;
  json?(body: unknown): void;
  send(body: unknown): void;
}

/** What a filter writing the response itself does: Express `res.status().json()`, Fastify `reply.status().send()`. */
function answer(host: ArgumentsHost, status: number, body: unknown, header?: [string, string]): void {
  const reply = host.switchToHttp().getResponse<ReplyLike>();
  const express = typeof reply.json === 'function';
  if (header) {
    if (express) reply.setHeader!(header[0], header[1]);
    else reply.header!(header[0], header[1]);
  }
  if (express) reply.status(status).json!(body);
  else reply.status(status).send(body);
}

@Catch(CardDeclinedError)
class CardDeclinedFilter implements ExceptionFilter {
  catch(error: CardDeclinedError, host: ArgumentsHost): void {
    answer(host, 402, { code: 'card_declined', decline: error.declineCode });
  }
}

@Catch(PaymentRequired)
class PaymentRequiredFilter implements ExceptionFilter {
  catch(error: PaymentRequired, host: ArgumentsHost): void {
    answer(host, 402, { code: 'payment_required', ...(error.getResponse() as object) }, ['x-filter', 'payment']);
  }
}

@Catch(BadRequestException)
class BadRequestFilter implements ExceptionFilter {
  catch(error: BadRequestException, host: ArgumentsHost): void {
    answer(host, 422, { code: 'invalid', detail: error.message });
  }
}

/** A catch-all, as applications write them: one answer for its own errors, Nest's for the rest. */
@Catch()
class EverythingFilter extends BaseExceptionFilter {
  override catch(error: unknown, host: ArgumentsHost): void {
    if (error instanceof QuotaError) return answer(host, 429, { code: 'quota', limit: error.limit, message: error.message });
    super.catch(error, host);
  }
}

/** A global interceptor of the application that sees every error of the chain inside it. */
@Injectable()
class ErrorWatcher implements NestInterceptor {
  static seen = 0;
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      catchError((error: unknown) => {
        ErrorWatcher.seen++;
        return throwError(() => error);
      }),
    );
  }
}

function controllerOf(effects: Effects): Type<unknown> {
  @Controller()
  @UseFilters(PaymentRequiredFilter)
  class ChargesController {
    @Post('declined')
    @Idempotent({ cacheErrors: [CardDeclinedError] })
    declined() {
      throw new CardDeclinedError(`insufficient_funds_${effects.hit('declined')}`);
    }

    @Post('payment-required')
    @Idempotent({ cacheErrors: [PaymentRequired] })
    paymentRequired() {
      throw new PaymentRequired(`trial ended ${effects.hit('payment-required')}`);
    }

    @Post('invalid')
    @UseFilters(BadRequestFilter)
    @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() < 500 })
    invalid() {
      throw new BadRequestException(`amount too small (${effects.hit('invalid')})`);
    }

    @Post('quota')
    @UseFilters(EverythingFilter)
    @Idempotent({ cacheErrors: [QuotaError] })
    quota() {
      throw new QuotaError(`quota exceeded ${effects.hit('quota')}`);
    }

    @Post('gone')
    @UseFilters(EverythingFilter)
    @Idempotent({ cacheErrors: (error) => error instanceof HttpException })
    gone() {
      throw new HttpException({ code: 'gone', run: effects.hit('gone') }, 410);
    }

    @Post('unmapped')
    @Idempotent({ cacheErrors: [UnmappedError] })
    unmapped() {
      throw new UnmappedError(`nobody maps this ${effects.hit('unmapped')}`);
    }
  }
  return ChargesController;
}

/** A memory store that, when told, writes cached errors as 0.6.x did: `props: { body }` and the status, no chain, no fields. */
class Store06 extends MemoryIdempotencyStore {
  as06 = false;

  override complete(key: string, token: string, completion: CompleteRequest): Promise<boolean> {
    return super.complete(key, token, this.as06 ? { ...completion, result: as06(completion.result) } : completion);
  }
}

function as06(result: string): string {
  const outcome = JSON.parse(result) as { kind: string; error?: { name: string; message: string; chain?: string[]; props?: unknown } };
  if (outcome.kind !== 'error' || !outcome.error) return result;
  const { name, message, chain, props } = outcome.error;
  const http = chain?.includes('HttpException');
  // 0.6.x named any other error after Nest's 500.
  const error = http ? { name, message, props } : { name: 'InternalServerErrorException', message: 'Internal server error', props };
  return JSON.stringify({ ...outcome, error });
}

async function start(platform: Platform, effects: Effects, store: Store06, interceptor: boolean): Promise<INestApplication> {
  const providers: Provider[] = [{ provide: APP_FILTER, useClass: CardDeclinedFilter }];
  if (interceptor) providers.push({ provide: APP_INTERCEPTOR, useClass: ErrorWatcher });
  @Module({
    imports: [IdempotencyModule.forRoot({ store, logger: false })],
    controllers: [controllerOf(effects)],
    providers,
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  await app.init();
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return app;
}

interface Seen {
  status: number;
  text: string;
  headers: Record<string, string>;
}

describe.each<Platform>(['express', 'fastify'])('a cached error replays through the exception filters (%s)', (platform) => {
  describe.each([false, true])('a global interceptor of the application: %s', (interceptor) => {
    const effects = new Effects();
    const store = new Store06();
    let app: INestApplication;
    let keys = 0;

    beforeAll(async () => {
      app = await start(platform, effects, store, interceptor);
    });
    afterAll(async () => {
      await app?.close();
    });
    afterEach(() => {
      store.as06 = false;
    });

    const send = async (path: string, key: string): Promise<Seen> => {
      const response = await request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send({});
      return { status: response.status, text: response.text, headers: response.headers as Record<string, string> };
    };

    /** Sends twice with one key: the replay is the first answer (status, content type, bytes), marked; the handler ran once. */
    async function firstAndReplay(path: string): Promise<Seen> {
      const key = `${path}-${++keys}`;
      const runs = effects.count(path.slice(1));
      const watched = ErrorWatcher.seen;
      const first = await send(path, key);
      const replay = await send(path, key);
      expect(first.headers['idempotent-replayed']).toBeUndefined();
      expect({ status: replay.status, type: replay.headers['content-type'], text: replay.text }).toEqual({
        status: first.status,
        type: first.headers['content-type'],
        text: first.text,
      });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(effects.count(path.slice(1)) - runs).toBe(1);
      // The replay is thrown from outside the application's interceptors: none sees it again.
      if (interceptor) expect(ErrorWatcher.seen - watched).toBe(1);
      return first;
    }

    it('a domain error a global @Catch() filter answers with 402 (written with res.status().json() / reply.status().send())', async () => {
      const first = await firstAndReplay('/declined');
      expect(first.status).toBe(402);
      expect(JSON.parse(first.text)).toEqual({ code: 'card_declined', decline: expect.stringMatching(/^insufficient_funds_\d+$/) });
      expect(first.headers['content-type']).toMatch(/^application\/json/);
    });

    it('an HttpException subclass listed in cacheErrors, caught by a filter on the controller (@UseFilters) that sets a header', async () => {
      const first = await firstAndReplay('/payment-required');
      expect(first.status).toBe(402);
      expect(JSON.parse(first.text)).toEqual({ code: 'payment_required', reason: expect.stringMatching(/^trial ended \d+$/) });
      expect(first.headers['x-filter']).toBe('payment');
    });

    it("Nest's BadRequestException selected by a predicate, caught by a filter on the route (@Catch(BadRequestException))", async () => {
      const first = await firstAndReplay('/invalid');
      expect(first.status).toBe(422);
      expect(JSON.parse(first.text)).toEqual({ code: 'invalid', detail: expect.stringMatching(/^amount too small/) });
    });

    it('a catch-all filter (a BaseExceptionFilter subclass) answering a listed domain error with its fields', async () => {
      const first = await firstAndReplay('/quota');
      expect(first.status).toBe(429);
      expect(JSON.parse(first.text)).toEqual({ code: 'quota', limit: 3, message: expect.stringMatching(/^quota exceeded \d+$/) });
    });

    it("a catch-all filter handing an HttpException to Nest's default (super.catch)", async () => {
      const first = await firstAndReplay('/gone');
      expect(first.status).toBe(410);
      expect(JSON.parse(first.text)).toEqual({ code: 'gone', run: expect.any(Number) });
    });

    it("a domain error no filter maps: Nest's 500, the same the second time", async () => {
      const first = await firstAndReplay('/unmapped');
      expect(first.status).toBe(500);
      expect(JSON.parse(first.text)).toEqual({ statusCode: 500, message: 'Internal server error' });
    });

    describe('records written by 0.6.x (props: { body }, no class chain)', () => {
      it('an HttpException: its stored status and body, as 0.6.x replayed it', async () => {
        store.as06 = true;
        const first = await firstAndReplay('/gone');
        expect(first.status).toBe(410);
      });

      it('an HttpException of a listed class: caught by the filter catching that class, as the first caller was', async () => {
        store.as06 = true;
        const first = await firstAndReplay('/payment-required');
        expect(JSON.parse(first.text)).toMatchObject({ code: 'payment_required' });
      });

      it("Nest's BadRequestException: caught by the filter catching it, as the first caller was", async () => {
        store.as06 = true;
        const first = await firstAndReplay('/invalid');
        expect(first.status).toBe(422);
      });

      it("a domain error no filter maps: Nest's 500, as stored by 0.6.x", async () => {
        store.as06 = true;
        const first = await firstAndReplay('/unmapped');
        expect(first.status).toBe(500);
      });

      it('a domain error a filter mapped: 0.6.x stored a 500, which still replays as such (the record cannot say more)', async () => {
        store.as06 = true;
        const key = `declined-06-${++keys}`;
        expect((await send('/declined', key)).status).toBe(402);
        const replay = await send('/declined', key);
        expect(replay.status).toBe(500);
        expect(JSON.parse(replay.text)).toEqual({ statusCode: 500, message: 'Internal server error' });
        expect(replay.headers['idempotent-replayed']).toBe('true');
      });
    });
  });
});
