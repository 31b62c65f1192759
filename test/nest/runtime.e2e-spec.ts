import { Controller, Module, Post, type ExecutionContext, type INestApplication, type INestMicroservice, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { MessagePattern, Payload, type ClientProxy } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import request from 'supertest';
import {
  Idempotent,
  IdempotencyError,
  IdempotencyInterceptor,
  IdempotencyModule,
  IdempotencyRuntime,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
  type IdempotencyModuleOptions,
  type ResolvedHandlerConfig,
  type TransportAdapter,
} from '../../lib/index.js';
import { type Settlement } from '../../lib/nest/index.js';
import { Effects } from '../support/effects.js';
import { NEST_LOGGER, startTcpMicroservice, uniqueName } from '../messages/support.js';

/**
 * One runtime behind both entry points: `@Idempotent()`'s method wrapper and a global
 * `IdempotencyInterceptor` answer alike, use the same hooks, and treat an error the
 * handler throws as the handler's (settled once), even when it is one of this library's.
 */

/** What a handler throws when a versioned update misses, like `OptimisticLockError` (an IdempotencyError, 409). */
class VersionConflictError extends IdempotencyError {
  constructor() {
    super('IDEMPOTENCY_OPTIMISTIC_LOCK', 409, 'Account 7 was changed concurrently.', 'Reload the account and apply the change again.', {
      title: 'Concurrent update',
    });
  }
}

type Registration = '@Idempotent()' | 'global IdempotencyInterceptor';
const REGISTRATIONS: Registration[] = ['@Idempotent()', 'global IdempotencyInterceptor'];

async function startHttp(controller: Type<unknown>, registration: Registration, module: IdempotencyModuleOptions, extra: unknown[] = []) {
  const providers = registration === '@Idempotent()' ? extra : [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }, ...extra];
  @Module({ imports: [IdempotencyModule.forRoot(module)], controllers: [controller], providers: providers as never[] })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: NEST_LOGGER });
  await app.init();
  return app;
}

describe.each(REGISTRATIONS)('a library error thrown by the handler itself (%s)', (registration) => {
  const effects = new Effects();
  const events: IdempotencyEvent[] = [];
  let cacheDecisions = 0;
  let app: INestApplication;

  @Controller()
  class AccountsController {
    @Post('debit-cached')
    @Idempotent({
      cacheErrors: (error) => {
        cacheDecisions++;
        return error instanceof VersionConflictError;
      },
    })
    debitCached() {
      effects.hit('debitCached');
      throw new VersionConflictError();
    }

    @Post('debit')
    @Idempotent()
    debit() {
      effects.hit('debit');
      throw new VersionConflictError();
    }
  }

  beforeAll(async () => {
    app = await startHttp(AccountsController, registration, { store: new MemoryIdempotencyStore(), onEvent: (e) => events.push(e) });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('with cacheErrors: stores the answer the first caller got, and replays exactly that (asking cacheErrors once)', async () => {
    const key = uniqueName('cached');
    const first = await request(app.getHttpServer()).post('/debit-cached').set('Idempotency-Key', key);
    const replay = await request(app.getHttpServer()).post('/debit-cached').set('Idempotency-Key', key);
    expect(first.status).toBe(409);
    expect(first.body).toEqual({
      type: 'urn:nestjs-idempotency:error:IDEMPOTENCY_OPTIMISTIC_LOCK',
      title: 'Concurrent update',
      status: 409,
      detail: 'Account 7 was changed concurrently.',
      code: 'IDEMPOTENCY_OPTIMISTIC_LOCK',
      hint: 'Reload the account and apply the change again.',
    });
    expect(replay.status).toBe(first.status);
    expect(replay.body).toEqual(first.body);
    expect(replay.headers['content-type']).toBe(first.headers['content-type']);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(effects.count('debitCached')).toBe(1);
    expect(cacheDecisions).toBe(1);
    const mine = events.filter((e) => e.handler === 'AccountsController.debitCached').map((e) => e.type);
    expect(mine).toEqual(['claimed', 'error_cached', 'replayed']);
  });

  it('without cacheErrors: answers with its problem body and releases the key, so a retry runs again', async () => {
    const key = uniqueName('released');
    const first = await request(app.getHttpServer()).post('/debit').set('Idempotency-Key', key);
    const retry = await request(app.getHttpServer()).post('/debit').set('Idempotency-Key', key);
    for (const answer of [first, retry]) {
      expect(answer.status).toBe(409);
      expect(answer.body).toMatchObject({ code: 'IDEMPOTENCY_OPTIMISTIC_LOCK', title: 'Concurrent update' });
      expect(answer.headers['idempotent-replayed']).toBeUndefined();
    }
    expect(effects.count('debit')).toBe(2);
    const mine = events.filter((e) => e.handler === 'AccountsController.debit').map((e) => e.type);
    expect(mine).toEqual(['claimed', 'released', 'claimed', 'released']);
  });
});

/** Records every settlement the runtime makes, per message key. */
const settlements = new Map<string, Settlement[]>();
class SettlementSpyRuntime extends IdempotencyRuntime {
  constructor(...args: ConstructorParameters<typeof IdempotencyRuntime>) {
    super(...args);
    const rpc = this.adapters.rpc!;
    const settle = rpc.settle!.bind(rpc);
    rpc.settle = (context, config, settlement, error) => {
      const id = context.switchToRpc().getData<{ id: string }>().id;
      settlements.set(id, [...(settlements.get(id) ?? []), settlement]);
      return settle(context, config, settlement, error);
    };
  }
}

describe('a library error thrown by a message handler', () => {
  const effects = new Effects();
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  @Controller()
  class LedgerConsumer {
    @MessagePattern('ledger.debit')
    @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id })
    debit(@Payload() data: { id: string }) {
      effects.hit(data.id);
      throw new VersionConflictError();
    }

    @MessagePattern('ledger.debit-cached')
    @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id, cacheErrors: () => true })
    debitCached(@Payload() data: { id: string }) {
      effects.hit(data.id);
      throw new VersionConflictError();
    }
  }

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), runtime: SettlementSpyRuntime })],
      controllers: [LedgerConsumer],
    })
    class LedgerModule {}
    ({ app, client } = await startTcpMicroservice(LedgerModule));
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  const failureOf = (pattern: string, id: string) =>
    firstValueFrom(client!.send(pattern, { id })).then(
      () => undefined,
      (error: unknown) => error,
    );

  it("is settled once, as the handler's failure (never also as a refusal), and reaches the client as its RPC error", async () => {
    const id = uniqueName('debit');
    const error = await failureOf('ledger.debit', id);
    expect(error).toMatchObject({ code: 'IDEMPOTENCY_OPTIMISTIC_LOCK', status: 409, title: 'Concurrent update' });
    expect(settlements.get(id)).toEqual(['failed']);
    expect(effects.count(id)).toBe(1);
  });

  it('with cacheErrors: settled once as stored, and the replay answers the same RPC error', async () => {
    const id = uniqueName('cached');
    const first = await failureOf('ledger.debit-cached', id);
    const replay = await failureOf('ledger.debit-cached', id);
    expect(first).toMatchObject({ code: 'IDEMPOTENCY_OPTIMISTIC_LOCK', status: 409 });
    expect(replay).toEqual(first);
    expect(settlements.get(id)).toEqual(['stored', 'replayed']);
    expect(effects.count(id)).toBe(1);
  });
});

/** Scopes keys by an `X-Tenant` header instead of `request.user`. */
class TenantRuntime extends IdempotencyRuntime {
  protected override resolvePrincipal(context: ExecutionContext): string | undefined {
    return context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-tenant'];
  }
}

class TenantInterceptor extends IdempotencyInterceptor {
  protected override resolvePrincipal(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter) {
    const tenant = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-tenant'];
    return tenant ?? super.resolvePrincipal(context, config, adapter);
  }
}

describe.each<[string, Registration | 'global IdempotencyInterceptor subclass']>([
  ['a runtime option', '@Idempotent()'],
  ['a runtime option', 'global IdempotencyInterceptor'],
  ['an interceptor subclass', 'global IdempotencyInterceptor subclass'],
])('hooks given as %s (%s)', (_how, registration) => {
  const effects = new Effects();
  let app: INestApplication;

  @Controller()
  class OrdersController {
    @Post('orders')
    @Idempotent()
    order() {
      return { n: effects.hit('order') };
    }
  }

  beforeAll(async () => {
    app =
      registration === 'global IdempotencyInterceptor subclass'
        ? await startHttp(OrdersController, '@Idempotent()', {}, [{ provide: APP_INTERCEPTOR, useClass: TenantInterceptor }])
        : await startHttp(OrdersController, registration, { runtime: TenantRuntime });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('keep two tenants with one key apart, and replay within a tenant', async () => {
    const key = uniqueName('order');
    const send = (tenant: string) => request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).set('X-Tenant', tenant);
    const a = await send('a');
    const b = await send('b');
    const again = await send('a');
    expect(a.body).toEqual({ n: 1 });
    expect(b.body).toEqual({ n: 2 });
    expect(again.body).toEqual({ n: 1 });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(effects.count('order')).toBe(2);
  });
});

describe('the runtime option', () => {
  it('refuses at boot what is not a subclass of IdempotencyRuntime, saying what to pass', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ runtime: class NotARuntime {} as never })] })
    class AppModule {}
    await expect(NestFactory.create(AppModule, { logger: false, abortOnError: false })).rejects.toThrow(
      /runtime must be a class that extends IdempotencyRuntime, got NotARuntime/,
    );
  });
});
