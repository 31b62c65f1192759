import { Controller, Module, Post, Req, type INestApplication } from '@nestjs/common';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { bootShape, expectApart, type Platform } from '../http-shapes.js';

/**
 * A shape found by attack (issue 41, items 1-2): tenants by host, declared as a list of static hosts
 * (`host: ['acme.example.com', 'globex.example.com']`, the form Nest documents for "several
 * hosts") with the handler picking the tenant from `req.hostname`. The operation is
 * `POST /orders host=acme.example.com|globex.example.com` for both tenants: globex gets
 * acme's stored order. A host RegExp matching the same two hosts keeps them apart (the
 * host name is added), a list of static hosts does not.
 */
let runs = 0;

@Controller({ host: ['acme.example.com', 'globex.example.com'], path: 'orders' })
class TenantOrdersController {
  @Post()
  @Idempotent()
  create(@Req() req: { hostname: string }) {
    return { run: ++runs, tenant: req.hostname.split('.')[0] };
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [TenantOrdersController] })
class AppModule {}

describe.each<Platform>(['express', 'fastify'])('shape: a list of static hosts on %s', (platform) => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(platform, AppModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('acme and globex, same key and body, are two operations', async () => {
    await expectApart(
      app,
      { path: '/orders', headers: { Host: 'acme.example.com' } },
      { path: '/orders', headers: { Host: 'globex.example.com' } },
      () => runs,
      'host list',
    );
  });
});
