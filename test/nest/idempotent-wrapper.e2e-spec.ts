import {
  BadRequestException,
  Body,
  Controller,
  HttpCode,
  Module,
  Post,
  UseGuards,
  type CanActivate,
  type INestApplication,
  type INestMicroservice,
  type PipeTransform,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, MessagePattern, TcpContext, type ClientProxy } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import request from 'supertest';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, type IdempotencyEvent } from '../../lib/index.js';
import { storageKeyOf } from '../../lib/core/index.js';
import { scopeOf } from '../../lib/nest/index.js';
import { Effects } from '../support/effects.js';
import { NEST_LOGGER, startTcpMicroservice, uniqueName } from '../messages/support.js';

/**
 * `@Idempotent()` wraps the method instead of adding an interceptor (so a route pays no
 * interceptor pipeline). What that must keep: pipes and guards before the claim, other
 * decorators' metadata, raw microservice arguments, direct calls from user code.
 */

const effects = new Effects();
let guardCalls = 0;

class AmountPipe implements PipeTransform {
  transform(value: { amount?: unknown }) {
    if (typeof value?.amount !== 'number') throw new BadRequestException('amount must be a number');
    return value;
  }
}

class CountingGuard implements CanActivate {
  canActivate() {
    guardCalls++;
    return true;
  }
}

@Controller()
class WrappedController {
  @Post('validated')
  @Idempotent()
  validated(@Body(AmountPipe) body: { amount: number }) {
    return { n: effects.hit('validated'), amount: body.amount };
  }

  // Decorators below @Idempotent() ran before it: their metadata must survive the wrapping.
  @Idempotent()
  @Post('accepted')
  @HttpCode(202)
  @UseGuards(CountingGuard)
  accepted() {
    return { n: effects.hit('accepted') };
  }

  @Post('direct')
  @Idempotent()
  direct(@Body() body: { amount: number }) {
    return { n: effects.hit('direct'), amount: body?.amount };
  }
}

describe('@Idempotent() as a method wrapper (express)', () => {
  let app: INestApplication;
  const store = new MemoryIdempotencyStore();
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store, onEvent: (e) => events.push(e) })], controllers: [WrappedController] })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: NEST_LOGGER });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
  });

  it('adds no interceptor to the route, so Nest skips its interceptor pipeline', () => {
    const handler = WrappedController.prototype.validated;
    expect(Reflect.getMetadata('__interceptors__', handler)).toBeUndefined();
    expect(Reflect.getMetadata('__interceptors__', WrappedController)).toBeUndefined();
  });

  it('lets a pipe refuse the request before the key is claimed', async () => {
    const key = uniqueName('pipe');
    const refused = await request(app.getHttpServer()).post('/validated').set('Idempotency-Key', key).send({ amount: 'x' });
    expect(refused.status).toBe(400);
    // The record would live under the route's scope: absent, as the pipe refused first.
    expect(await store.get(storageKeyOf(scopeOf('POST /validated'), key))).toBeUndefined();
    // The corrected request with the same key runs (no 422 for the refused body, no record to replay).
    const before = effects.count('validated');
    const ok = await request(app.getHttpServer()).post('/validated').set('Idempotency-Key', key).send({ amount: 3 });
    expect(ok.status).toBe(201);
    expect(effects.count('validated') - before).toBe(1);
    const replay = await request(app.getHttpServer()).post('/validated').set('Idempotency-Key', key).send({ amount: 3 });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(ok.body);
    expect(effects.count('validated') - before).toBe(1);
  });

  it('keeps the status code, route and guards declared below it', async () => {
    const key = uniqueName('below');
    const guardsBefore = guardCalls;
    const first = await request(app.getHttpServer()).post('/accepted').set('Idempotency-Key', key);
    const second = await request(app.getHttpServer()).post('/accepted').set('Idempotency-Key', key);
    expect(first.status).toBe(202);
    expect(second.status).toBe(202);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.body).toEqual(first.body);
    expect(guardCalls - guardsBefore).toBe(2);
    expect(events.some((e) => e.handler === 'WrappedController.accepted' && e.type === 'claimed')).toBe(true);
  });

  it('refuses a direct call from your own code (no request, so no key), touching no store', async () => {
    const controller = app.get(WrappedController);
    const before = effects.count('direct');
    const eventsBefore = events.length;
    expect(() => controller.direct({ amount: 1 })).toThrow(/WrappedController\.direct: this request handler was called directly/);
    expect(effects.count('direct')).toBe(before);
    expect(events.length).toBe(eventsBefore);
  });

  it('refuses to be applied twice to one method, saying how to fix it', () => {
    expect(() => {
      class Twice {
        @Idempotent()
        @Idempotent()
        handle() {
          return 1;
        }
      }
      return Twice;
    }).toThrow(/applied twice to Twice\.handle.*Keep one @Idempotent\(\)/s);
  });
});

describe('@Idempotent() on a microservice handler without parameter decorators (TCP)', () => {
  const rpcEffects = new Effects();
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  @Controller()
  class RawArgsController {
    // No @Payload(): Nest passes (data, context) as they are, and still must after wrapping.
    @MessagePattern('raw.create')
    @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id })
    create(data: { id: string; amount: number }, context: TcpContext) {
      return { id: data.id, amount: data.amount, n: rpcEffects.hit(data.id), tcp: context instanceof TcpContext };
    }

    // A decorated parameter before an undecorated one: Nest passes only the decorated ones.
    @MessagePattern('raw.ctx')
    @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id })
    withContext(@Ctx() context: TcpContext) {
      return { n: rpcEffects.hit('ctx'), tcp: context instanceof TcpContext };
    }
  }

  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [RawArgsController] })
    class TcpModule {}
    ({ app, client } = await startTcpMicroservice(TcpModule));
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  it('hands the handler its raw data and context, once per key', async () => {
    const id = uniqueName('raw');
    const answers = await Promise.all(Array.from({ length: 10 }, () => firstValueFrom(client!.send('raw.create', { id, amount: 9 }))));
    for (const answer of answers) expect(answer).toEqual({ id, amount: 9, n: 1, tcp: true });
    expect(rpcEffects.count(id)).toBe(1);
  });

  it('hands a decorated @Ctx() parameter its context', async () => {
    const id = uniqueName('ctx');
    const first = await firstValueFrom(client!.send('raw.ctx', { id }));
    const second = await firstValueFrom(client!.send('raw.ctx', { id }));
    expect(first).toEqual({ n: 1, tcp: true });
    expect(second).toEqual(first);
  });
});

describe('@Idempotent() applied with Reflect.decorate() from plain JavaScript', () => {
  it('installs its wrapper even when the caller never defines the returned descriptor', async () => {
    let runs = 0;
    class PlainController {
      charge(body: { amount: number }) {
        runs += 1;
        return { id: `pay_${runs}`, amount: body.amount };
      }
    }
    Reflect.decorate([Controller('plain')], PlainController);
    // What a plain-JavaScript app writes: the returned descriptor is dropped.
    Reflect.decorate(
      [Post(), Idempotent(), (target: object, key: string | symbol | undefined) => Body()(target, key!, 0)],
      PlainController.prototype,
      'charge',
      Object.getOwnPropertyDescriptor(PlainController.prototype, 'charge'),
    );
    @Module({ imports: [IdempotencyModule.forRoot()], controllers: [PlainController] })
    class PlainModule {}
    const app = await NestFactory.create(PlainModule, { logger: NEST_LOGGER });
    try {
      await app.init();
      const key = uniqueName('plain');
      const first = await request(app.getHttpServer()).post('/plain').set('Idempotency-Key', key).send({ amount: 4 });
      const second = await request(app.getHttpServer()).post('/plain').set('Idempotency-Key', key).send({ amount: 4 });
      expect(first.status).toBe(201);
      expect(second.status).toBe(201);
      expect(second.headers['idempotent-replayed']).toBe('true');
      expect(second.body).toEqual(first.body);
      expect(runs).toBe(1);
    } finally {
      await app.close();
    }
  });
});
