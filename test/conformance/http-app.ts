import {
  Body,
  Catch,
  Controller,
  HttpException,
  Injectable,
  Module,
  Post,
  Put,
  Req,
  UploadedFile,
  UseInterceptors,
  type ArgumentsHost,
  type CallHandler,
  type CanActivate,
  type ExceptionFilter,
  type ExecutionContext,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';
import { FileInterceptor } from '@nestjs/platform-express';
import { Exclude, Expose } from 'class-transformer';
import type Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import { map, type Observable } from 'rxjs';
import { Idempotent } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { deleteKeys, redisClient, runPrefix } from '../integrations/support.js';
import type { Effects } from '../support/effects.js';
import { stepProbe } from './steps.js';
import { UNREADABLE, type Answer, type Hold } from './conformance.js';

/*
 * The application of the HTTP drivers (http.driver.ts): its routes, the secrets its
 * answers hide, its test authentication, and the Redis records of the express-redis suite.
 */

export type Platform = 'express' | 'fastify';

export const SECRET_HASH = `pbkdf2$conformance$${randomUUID()}`;
export const SECRET_KEY = `sk_live_conformance_${randomUUID().replace(/-/g, '')}`;
export const SECRET_NOTE = `internal-note-${randomUUID()}`;

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
export class UserFromHeaderGuard implements CanActivate {
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
export class EnvelopeInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((value) => {
        const { internalNote: _dropped, ...rest } = value as Record<string, unknown>;
        return { data: rest, envelope: 'v1' };
      }),
    );
  }
}

/** A domain error (no HttpException) that the application's own exception filter answers. */
export class CardDeclinedError extends Error {
  constructor(readonly run: number) {
    super('card declined');
  }
}

/**
 * The application's global exception filter (APP_FILTER) for `CardDeclinedError`: 402
 * with a body of its own, written by the filter itself (Express `res.status().json()`,
 * Fastify `reply.status().send()`).
 */
@Catch(CardDeclinedError)
export class CardDeclinedFilter implements ExceptionFilter {
  catch(error: CardDeclinedError, host: ArgumentsHost): void {
    const reply = host.switchToHttp().getResponse<{ status(code: number): { json?(body: unknown): void; send(body: unknown): void } }>();
    const body = { code: 'card_declined', run: error.run };
    const status = reply.status(402);
    if (typeof status.json === 'function') status.json(body);
    else status.send(body);
  }
}

function answer(effects: Effects, operation: string, request: { user?: { id?: string } }, body: unknown): Answer & { body: unknown } {
  return { operation, principal: request.user?.id, run: effects.hit(operation), body };
}

export function controllers(effects: Effects, platform: Platform, held: Hold): Type<unknown>[] {
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

    @Post('steps')
    @Idempotent()
    async steps(@Req() request: { user?: { id?: string } }, @Body() body: unknown) {
      await stepProbe.run();
      return answer(effects, 'POST /conf/steps', request, body);
    }

    @Post('declines')
    @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() === 402 })
    decline() {
      throw new HttpException({ message: 'card declined', run: effects.hit('POST /conf/declines') }, 402);
    }

    @Post('declined')
    @Idempotent({ cacheErrors: [CardDeclinedError] })
    declined() {
      throw new CardDeclinedError(effects.hit('POST /conf/declined'));
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
export function versionedModule(effects: Effects, version: string): Type<unknown> {
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

export const ROUTES: Record<string, { method: string; path: string }> = {};
for (const operation of [
  'POST /conf/refunds',
  'PUT /conf/refunds',
  'POST /conf/credits',
  'POST /conf/account',
  'POST /conf/held',
  'POST /conf/declines',
  'POST /conf/declined',
  'POST /conf/steps',
  'POST /conf/mapped',
  'POST /conf/uploads',
  'POST /conf/v1/items',
  'POST /conf/v2/items',
]) {
  const [method, path] = operation.split(' ');
  ROUTES[operation] = { method, path };
}

/** A RedisIdempotencyStore under a prefix of this run, and every record under it, as Redis holds it. */
export class RedisRecords {
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
