import { Body, Controller, HostParam, Module, Post, Version, VersioningType, type INestApplication, type Type } from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { RouteConstraints } from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../lib/index.js';
import { bootShape, expectApart, freshKey, send, type Platform } from './http-shapes.js';

/**
 * The catalogue, routing: everything Nest's router uses to pick a handler is part of the
 * operation, so two handlers (or two tenants of one host pattern) never share a record,
 * and a retry to the same one replays. Each shape on the platforms it exists on.
 */

let runs = 0;
const answer = (where: string, extra: object = {}) => ({ run: ++runs, where, ...extra });

@Controller({ host: ':tenant.example.com', path: 'orders' })
class TenantOrdersController {
  @Post()
  @Idempotent()
  create(@HostParam('tenant') tenant: string, @Body() body: object) {
    return answer('tenant', { tenant, body });
  }
}

@Controller({ host: 'admin.example.com', path: 'accounts' })
class AdminAccountsController {
  @Post()
  @Idempotent()
  create() {
    return answer('admin');
  }
}

@Controller({ host: 'shop.example.com', path: 'accounts' })
class ShopAccountsController {
  @Post()
  @Idempotent()
  create() {
    return answer('shop');
  }
}

@Controller({ host: /^[a-z]+\.pattern\.test$/, path: 'invoices' })
class RegExpHostController {
  @Post()
  @Idempotent()
  create() {
    return answer('regexp');
  }
}

@Controller('refunds')
class VersionedRefundsController {
  @Post()
  @Version('1')
  @Idempotent()
  v1() {
    return answer('v1');
  }

  @Post()
  @Version('2')
  @Idempotent()
  v2() {
    return answer('v2');
  }
}

function moduleOf(store: MemoryIdempotencyStore, ...controllers: Type<unknown>[]): Type<unknown> {
  @Module({ imports: [IdempotencyModule.forRoot({ store })], controllers })
  class ShapeModule {}
  return ShapeModule;
}

const host = (name: string) => ({ path: '/orders', headers: { Host: name } });

describe.each<Platform>(['express', 'fastify'])('routing shapes on %s', (platform) => {
  const apps: INestApplication[] = [];
  const boot = async (module: Type<unknown>, configure?: (app: INestApplication) => void) => {
    const app = await bootShape(platform, module, configure);
    apps.push(app);
    return app;
  };
  afterAll(async () => {
    for (const app of apps) await app.close();
  });

  it('host parameters: two tenants of :tenant.example.com, same key and body', async () => {
    const app = await boot(moduleOf(new MemoryIdempotencyStore(), TenantOrdersController));
    await expectApart(app, host('acme.example.com'), host('globex.example.com'), () => runs, 'host params');
  });

  it('URI versioning: v1 and v2 of one route', async () => {
    const app = await boot(moduleOf(new MemoryIdempotencyStore(), VersionedRefundsController), (a) =>
      a.enableVersioning({ type: VersioningType.URI }),
    );
    await expectApart(app, { path: '/v1/refunds' }, { path: '/v2/refunds' }, () => runs, 'uri versions');
  });

  it('header versioning: v1 and v2 of one route', async () => {
    const app = await boot(moduleOf(new MemoryIdempotencyStore(), VersionedRefundsController), (a) =>
      a.enableVersioning({ type: VersioningType.HEADER, header: 'X-Api-Version' }),
    );
    await expectApart(
      app,
      { path: '/refunds', headers: { 'X-Api-Version': '1' } },
      { path: '/refunds', headers: { 'X-Api-Version': '2' } },
      () => runs,
      'header versions',
    );
  });

  it('media-type versioning: v1 and v2 of one route', async () => {
    const app = await boot(moduleOf(new MemoryIdempotencyStore(), VersionedRefundsController), (a) =>
      a.enableVersioning({ type: VersioningType.MEDIA_TYPE, key: 'v=' }),
    );
    await expectApart(
      app,
      { path: '/refunds', headers: { Accept: 'application/json;v=1' } },
      { path: '/refunds', headers: { Accept: 'application/json;v=2' } },
      () => runs,
      'media-type versions',
    );
  });

  it('RouterModule paths: one controller class mounted under two paths', async () => {
    @Controller('payments')
    class PaymentsController {
      @Post()
      @Idempotent()
      pay() {
        return answer('payments');
      }
    }
    @Module({ controllers: [PaymentsController] })
    class EuModule {}
    @Module({ controllers: [PaymentsController] })
    class UsModule {}
    @Module({
      imports: [
        IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), isGlobal: true }),
        EuModule,
        UsModule,
        RouterModule.register([
          { path: 'eu', module: EuModule },
          { path: 'us', module: UsModule },
        ]),
      ],
    })
    class RoutedModule {}
    const app = await boot(RoutedModule);
    await expectApart(app, { path: '/eu/payments' }, { path: '/us/payments' }, () => runs, 'router module');
  });

  it('global prefix: two applications in one process on one store, one with a prefix', async () => {
    const store = new MemoryIdempotencyStore();
    const first = await boot(moduleOf(store, VersionedRefundsController), (a) => {
      a.setGlobalPrefix('api');
      a.enableVersioning({ type: VersioningType.URI });
    });
    const second = await boot(moduleOf(store, VersionedRefundsController), (a) => a.enableVersioning({ type: VersioningType.URI }));
    await expectApart({ first, second }, { path: '/api/v1/refunds' }, { path: '/v1/refunds' }, () => runs, 'global prefix');
  });

  it('two instances of one application on one store share their records (a retry may reach either)', async () => {
    const store = new MemoryIdempotencyStore();
    const first = await boot(moduleOf(store, TenantOrdersController));
    const second = await boot(moduleOf(store, TenantOrdersController));
    const key = freshKey('instances');
    const a = await send(first, key, host('acme.example.com'));
    const retry = await send(second, key, host('acme.example.com'));
    expect({ status: retry.status, replayed: retry.replayed, text: retry.text }).toEqual({
      status: a.status,
      replayed: true,
      text: a.text,
    });
  });
});

describe('routing shapes on express only', () => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(
      'express',
      moduleOf(new MemoryIdempotencyStore(), AdminAccountsController, ShopAccountsController, RegExpHostController),
    );
  });
  afterAll(async () => {
    await app?.close();
  });

  // Fastify answers 404 for a second controller on the same path (Nest's host filter cannot pass a request on there).
  it('two controllers on one path and two static hosts', async () => {
    await expectApart(
      app,
      { path: '/accounts', headers: { Host: 'admin.example.com' } },
      { path: '/accounts', headers: { Host: 'shop.example.com' } },
      () => runs,
      'static hosts',
    );
  });

  it('a host regular expression without named groups: each host name is its own operation', async () => {
    await expectApart(
      app,
      { path: '/invoices', headers: { Host: 'acme.pattern.test' } },
      { path: '/invoices', headers: { Host: 'globex.pattern.test' } },
      () => runs,
      'regexp host',
    );
  });
});

describe('routing shapes on fastify only', () => {
  @Controller('tickets')
  class ConstrainedController {
    @Post()
    @RouteConstraints({ host: 'admin.example.com' })
    @Idempotent()
    admin() {
      return answer('admin');
    }

    @Post()
    @RouteConstraints({ host: 'shop.example.com' })
    @Idempotent()
    shop() {
      return answer('shop');
    }
  }
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape('fastify', moduleOf(new MemoryIdempotencyStore(), ConstrainedController));
  });
  afterAll(async () => {
    await app?.close();
  });

  it("two handlers on one path told apart by Fastify's host constraint", async () => {
    await expectApart(
      app,
      { path: '/tickets', headers: { Host: 'admin.example.com' } },
      { path: '/tickets', headers: { Host: 'shop.example.com' } },
      () => runs,
      'fastify host constraint',
    );
  });
});
