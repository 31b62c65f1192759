import {
  Body,
  ClassSerializerInterceptor,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  Put,
  Req,
  UploadedFile,
  UseInterceptors,
  type CallHandler,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { FileInterceptor } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Exclude, Expose } from 'class-transformer';
import { randomUUID } from 'node:crypto';
import { map, type Observable } from 'rxjs';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule } from '../../lib/index.js';
import type Redis from 'ioredis';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { deleteKeys, redisClient, runPrefix } from '../integrations/support.js';
import { Effects } from '../support/effects.js';
import { entryId } from './drivers.js';
import {
  CONFIGURATION,
  Hold,
  IN_FLIGHT,
  UNREADABLE,
  KEY_MISSING,
  MISMATCH,
  type Answer,
  type ConformanceDriver,
  type ReplayCase,
} from './conformance.js';

/**
 * HTTP on Express and Fastify, over real HTTP (fetch), so that "what the caller saw" is
 * the status, the headers and the body's bytes. Nest's ClassSerializerInterceptor is
 * registered globally (APP_INTERCEPTOR), and `x-user` becomes `request.user`.
 */
export type Platform = 'express' | 'fastify';

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

const SECRET_HASH = `pbkdf2$conformance$${randomUUID()}`;
const SECRET_KEY = `sk_live_conformance_${randomUUID().replace(/-/g, '')}`;
const SECRET_NOTE = `internal-note-${randomUUID()}`;

/** A class whose secrets Nest's ClassSerializerInterceptor leaves out of the answer. */
export class Account {
  id!: string;
  run!: number;
  @Exclude()
  passwordHash!: string;
  @Exclude()
  apiKey!: string;
  constructor(values: Partial<Account>) {
    Object.assign(this, values);
  }
  @Expose()
  get displayName(): string {
    return `account ${this.id} (run ${this.run})`;
  }
}

/** Test authentication: `x-user: alice` becomes `request.user = { id: 'alice' }`; `x-user: !` a user without an id. */
@Injectable()
class UserFromHeaderGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; user?: unknown }>();
    const user = request.headers['x-user'];
    if (user === UNREADABLE) request.user = { name: 'no id' };
    else if (user) request.user = { id: user };
    return true;
  }
}

/** A user's response-mapping interceptor: wraps answers and drops an internal field. */
@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((value) => {
        const { internalNote: _dropped, ...rest } = value as Record<string, unknown>;
        return { data: rest, envelope: 'v1' };
      }),
    );
  }
}

function answer(effects: Effects, operation: string, request: { user?: { id?: string } }, body: unknown): Answer & { body: unknown } {
  return { operation, principal: request.user?.id, run: effects.hit(operation), body };
}

function controllers(effects: Effects, platform: Platform, held: Hold): Type<unknown>[] {
  @Controller('conf')
  class ConformanceController {
    @Post('refunds')
    @Idempotent()
    postRefund(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      return answer(effects, 'POST /conf/refunds', request, body);
    }

    @Put('refunds')
    @Idempotent()
    putRefund(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      return answer(effects, 'PUT /conf/refunds', request, body);
    }

    @Post('credits')
    @Idempotent()
    credit(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      return answer(effects, 'POST /conf/credits', request, body);
    }

    @Post('held')
    @Idempotent()
    async held(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      const value = answer(effects, 'POST /conf/held', request, body);
      await held.gate;
      return value;
    }

    @Post('declines')
    @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() === 402 })
    decline() {
      throw new HttpException({ message: 'card declined', run: effects.hit('POST /conf/declines') }, 402);
    }

    @Post('account')
    @Idempotent()
    account() {
      const run = effects.hit('POST /conf/account');
      return new Account({ id: 'acct_1', run, passwordHash: SECRET_HASH, apiKey: SECRET_KEY });
    }

    @Post('mapped')
    @UseInterceptors(EnvelopeInterceptor)
    @Idempotent()
    mapped() {
      return { id: 'm_1', run: effects.hit('POST /conf/mapped'), internalNote: SECRET_NOTE };
    }
  }

  const list: Type<unknown>[] = [ConformanceController];
  if (platform === 'express') {
    // Multer is what @nestjs/platform-express uploads with (Fastify needs @fastify/multipart, not installed here).
    @Controller('conf')
    class UploadController {
      @Post('uploads')
      @UseInterceptors(FileInterceptor('file'))
      @Idempotent()
      upload(
        @Req() request: { user?: { id?: string } },
        @Body() body: unknown,
        @UploadedFile() file: { originalname: string; size: number },
      ) {
        return answer(effects, 'POST /conf/uploads', request, { body, file: { name: file?.originalname, size: file?.size } });
      }
    }
    list.push(UploadController);
  }
  return list;
}

/** Two controllers named RefundsController, one per feature module, at their own paths. */
function versionedModule(effects: Effects, version: string): Type<unknown> {
  @Controller(`conf/${version}/items`)
  class RefundsController {
    @Post()
    @Idempotent()
    create(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      return answer(effects, `POST /conf/${version}/items`, request, body);
    }
  }
  @Module({ controllers: [RefundsController] })
  class FeatureModule {}
  return FeatureModule;
}

const ROUTES: Record<string, { method: string; path: string }> = {};
for (const operation of [
  'POST /conf/refunds',
  'PUT /conf/refunds',
  'POST /conf/credits',
  'POST /conf/account',
  'POST /conf/held',
  'POST /conf/declines',
  'POST /conf/mapped',
  'POST /conf/uploads',
  'POST /conf/v1/items',
  'POST /conf/v2/items',
]) {
  const [method, path] = operation.split(' ');
  ROUTES[operation] = { method, path };
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

/** A RedisIdempotencyStore under a prefix of this run, and every record under it, as Redis holds it. */
class RedisRecords {
  private constructor(
    private readonly client: Redis,
    readonly store: RedisIdempotencyStore,
    private readonly prefix: string,
  ) {}

  static async open(): Promise<RedisRecords> {
    const client = redisClient();
    const prefix = `${runPrefix('conformance-http')}:`;
    return new RedisRecords(client, new RedisIdempotencyStore(client, { prefix }), prefix);
  }

  async records(): Promise<string[]> {
    const records: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await this.client.scan(cursor, 'MATCH', `${this.prefix}*`, 'COUNT', 1000);
      cursor = next;
      for (const key of keys) records.push(JSON.stringify(await this.client.hgetall(key)));
    } while (cursor !== '0');
    return records;
  }

  async close(): Promise<void> {
    await deleteKeys(this.client, this.prefix);
    this.client.disconnect();
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
  };
}
