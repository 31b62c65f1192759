import { ClassSerializerInterceptor, Module, type INestApplication } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { IdempotencyInterceptor, IdempotencyModule } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import {
  CONFIGURATION,
  Hold,
  IN_FLIGHT,
  KEY_MISSING,
  MISMATCH,
  type Answer,
  type ConformanceDriver,
  type ReplayCase,
} from './conformance.js';
import { entryId } from './drivers.js';
import {
  CardDeclinedFilter,
  RedisRecords,
  ROUTES,
  SECRET_HASH,
  SECRET_KEY,
  SECRET_NOTE,
  UserFromHeaderGuard,
  controllers,
  versionedModule,
  type Platform,
} from './http-app.js';
import { stepProbe } from './steps.js';

export type { Platform };

/**
 * HTTP on Express and Fastify, over real HTTP (fetch), so that "what the caller saw" is
 * the status, the headers and the body's bytes. Nest's ClassSerializerInterceptor is
 * registered globally (APP_INTERCEPTOR), and `x-user` becomes `request.user`.
 */

export interface HttpInput {
  readonly body?: Record<string, unknown>;
  readonly query?: string;
  /** Sent as multipart/form-data, field `file`, with the body's fields beside it. */
  readonly file?: { readonly name: string; readonly content: string };
}

export interface HttpSeen {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly bytes: Buffer;
}

function text(seen: HttpSeen): string {
  return `${seen.status} ${seen.headers['content-type'] ?? ''} ${seen.bytes.toString('utf8').slice(0, 400)}`;
}

function json(seen: HttpSeen): Record<string, unknown> {
  try {
    return JSON.parse(seen.bytes.toString('utf8')) as Record<string, unknown>;
  } catch {
    throw new Error(`expected a JSON body, the caller got ${text(seen)}`);
  }
}

const STATUS_OF: Record<string, number> = { [MISMATCH]: 422, [KEY_MISSING]: 400, [IN_FLIGHT]: 409, [CONFIGURATION]: 500 };

/** The replay is the first answer byte for byte, with its status and content type, marked as a replay. */
function expectSameHttp(first: HttpSeen, replay: HttpSeen): void {
  expect(replay.status).toBe(first.status);
  expect(replay.headers['content-type']).toBe(first.headers['content-type']);
  expect(replay.bytes.toString('utf8')).toBe(first.bytes.toString('utf8'));
  expect(replay.bytes.equals(first.bytes)).toBe(true);
  expect(first.headers['idempotent-replayed']).toBeUndefined();
  expect(replay.headers['idempotent-replayed']).toBe('true');
}

/** `interceptor`: IdempotencyInterceptor registered globally (APP_INTERCEPTOR) runs the protocol instead of @Idempotent()'s method wrapper. */
/** `redis`: the records live in a RedisIdempotencyStore, read back from Redis for the secrets check. */
export function httpDriver(
  platform: Platform,
  options: { interceptor?: boolean; redis?: boolean } = {},
): ConformanceDriver<HttpInput, HttpSeen> {
  const effects = new Effects();
  const held = new Hold();
  let app: INestApplication;
  let redis: RedisRecords | undefined;
  let base = '';

  const replays: ReplayCase<HttpInput, HttpSeen>[] = [
    {
      name: 'ClassSerializerInterceptor (global APP_INTERCEPTOR), a class with @Exclude() fields and an @Expose() getter: same bytes, status, replay header; the secrets never reach the store',
      operation: 'POST /conf/account',
      input: {},
      secrets: [SECRET_HASH, SECRET_KEY],
      expectSame(first, replay) {
        // The first answer is the serialized one (else this would prove nothing).
        expect(json(first)).toEqual({ id: 'acct_1', run: expect.any(Number), displayName: expect.stringContaining('acct_1') });
        expectSameHttp(first, replay);
      },
    },
    {
      name: "a user's mapping interceptor on the route (@UseInterceptors) that drops a field: same bytes; the dropped field never reaches the store",
      operation: 'POST /conf/mapped',
      input: {},
      secrets: [SECRET_NOTE],
      expectSame(first, replay) {
        expect(json(first)).toEqual({ data: { id: 'm_1', run: expect.any(Number) }, envelope: 'v1' });
        expectSameHttp(first, replay);
      },
    },
    {
      name: 'a cached HttpException (cacheErrors): same bytes, status 402, replay header',
      operation: 'POST /conf/declines',
      input: {},
      cachedError: true,
      expectSame(first, replay) {
        expect(first.status).toBe(402);
        expectSameHttp(first, replay);
      },
    },
    {
      name: "a cached domain error (cacheErrors: [CardDeclinedError]) the application's global exception filter answers with 402: same bytes, status, replay header",
      operation: 'POST /conf/declined',
      input: {},
      cachedError: true,
      expectSame(first, replay) {
        expect(first.status).toBe(402);
        expect(json(first)).toEqual({ code: 'card_declined', run: expect.any(Number) });
        expectSameHttp(first, replay);
      },
    },
    {
      name: 'a JSON answer: same bytes, status, replay header',
      operation: 'POST /conf/refunds',
      input: { body: { amount: 5, note: 'ünïcødé ✓' } },
      expectSame: expectSameHttp,
    },
  ];

  const inputPairs: { name: string; a: HttpInput; b: HttpInput }[] = [
    { name: 'another JSON body', a: { body: { amount: 1 } }, b: { body: { amount: 2 } } },
    { name: 'another query string', a: { body: { amount: 1 }, query: 'currency=eur' }, b: { body: { amount: 1 }, query: 'currency=usd' } },
  ];

  return {
    entry: entryId(options.redis ? `${platform}-redis` : options.interceptor ? `${platform}-interceptor` : platform),
    async boot(memory) {
      const store = options.redis ? (redis = await RedisRecords.open()).store : memory;
      @Module({
        imports: [
          IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }),
          versionedModule(effects, 'v1'),
          versionedModule(effects, 'v2'),
        ],
        controllers: controllers(effects, platform, held),
        providers: [
          { provide: APP_GUARD, useClass: UserFromHeaderGuard },
          { provide: APP_FILTER, useClass: CardDeclinedFilter },
          { provide: APP_INTERCEPTOR, useClass: ClassSerializerInterceptor },
          ...(options.interceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : []),
        ],
      })
      class AppModule {}
      app =
        platform === 'fastify'
          ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
          : await NestFactory.create(AppModule, { logger: false });
      await app.listen(0, '127.0.0.1');
      base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    },
    async close() {
      await app?.close();
      await redis?.close();
    },
    records: options.redis ? () => redis!.records() : undefined,
    async call({ operation, key, principal, input }) {
      const route = ROUTES[operation];
      const headers: Record<string, string> = {};
      if (key !== undefined) headers['idempotency-key'] = key;
      if (principal) headers['x-user'] = principal;
      let body: string | FormData | undefined;
      if (input.file) {
        const form = new FormData();
        for (const [name, value] of Object.entries(input.body ?? {})) form.append(name, String(value));
        form.append('file', new Blob([input.file.content], { type: 'text/plain' }), input.file.name);
        body = form;
      } else {
        headers['content-type'] = 'application/json';
        body = JSON.stringify(input.body ?? {});
      }
      const response = await fetch(`${base}${route.path}${input.query ? `?${input.query}` : ''}`, { method: route.method, headers, body });
      const responseHeaders: Record<string, string> = {};
      response.headers.forEach((value, name) => (responseHeaders[name] = value));
      return { status: response.status, headers: responseHeaders, bytes: Buffer.from(await response.arrayBuffer()) };
    },
    answerOf(seen) {
      if (seen.status >= 300) throw new Error(`expected an answer, the caller got ${text(seen)}`);
      return json(seen) as unknown as Answer;
    },
    refusalOf(seen) {
      if (seen.status < 400) return undefined;
      const body = json(seen);
      if (!String(seen.headers['content-type']).startsWith('application/problem+json') || typeof body.code !== 'string') {
        throw new Error(`expected a problem+json refusal, the caller got ${text(seen)}`);
      }
      return body.code;
    },
    expectRefusalShape(seen, code) {
      expect(seen.status).toBe(STATUS_OF[code]);
      expect(seen.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(json(seen)).toEqual({
        type: `urn:nestjs-idempotency:error:${code}`,
        title: expect.any(String),
        status: STATUS_OF[code],
        detail: expect.any(String),
        code,
        hint: expect.any(String),
      });
      expect(seen.headers['idempotent-replayed']).toBeUndefined();
      // A client told to come back is told when.
      if (code === IN_FLIGHT) expect(Number(seen.headers['retry-after'])).toBeGreaterThan(0);
    },
    runs: (operation) => effects.count(operation),
    input: { body: { amount: 10 } },
    principals: { operation: 'POST /conf/refunds', via: ['request.user'], failsClosed: true },
    operations: [
      { name: 'two routes', a: 'POST /conf/refunds', b: 'POST /conf/credits' },
      { name: 'two routes that differ only by method (POST and PUT /conf/refunds)', a: 'POST /conf/refunds', b: 'PUT /conf/refunds' },
      {
        name: 'two controllers whose classes share a name (RefundsController in two modules)',
        a: 'POST /conf/v1/items',
        b: 'POST /conf/v2/items',
      },
    ],
    inputs: {
      operation: platform === 'express' ? 'POST /conf/uploads' : 'POST /conf/refunds',
      pairs:
        platform === 'express'
          ? [
              ...inputPairs,
              {
                name: 'another uploaded file (multer FileInterceptor: same name, same fields)',
                a: { body: { amount: 1 }, file: { name: 'receipt.txt', content: 'first receipt' } },
                b: { body: { amount: 1 }, file: { name: 'receipt.txt', content: 'other receipt' } },
              },
            ]
          : inputPairs,
    },
    replays,
    refusals: { operation: 'POST /conf/refunds', missingKey: true },
    inFlight: { operation: 'POST /conf/held', hold: held.hold },
    steps: { operation: 'POST /conf/steps', probe: stepProbe },
  };
}
