import { Controller, Module, Post, VersioningType, type INestApplication } from '@nestjs/common';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import request from 'supertest';
import { bootShape, expectApart, type Platform } from '../http-shapes.js';

/**
 * A shape found by attack (versioning): route-operation.ts guesses whether the version
 * is already in the template from the template's TEXT (`versionInPath`: a segment equal to
 * `2` or `v2`), not from the versioning type the app enabled. Under header versioning, a
 * path that has such a segment of its own (`/partners/v2/orders`, a partner API "v2"
 * revised by header) drops `@2` from the operation. The version-2 handler then shares
 * `POST /partners/v2/orders` with the unversioned handler of the same path (Nest serves it
 * to requests without the header, or with another version): one answers for the other.
 */
let runs = 0;

@Controller({ path: 'partners/v2/orders', version: '2' })
class RevisedOrdersController {
  @Post()
  @Idempotent()
  create() {
    return { run: ++runs, handler: 'revision 2' };
  }
}

@Controller('partners/v2/orders')
class OrdersController {
  @Post()
  @Idempotent()
  create() {
    return { run: ++runs, handler: 'unversioned' };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [RevisedOrdersController, OrdersController],
})
class AppModule {}

describe.each<Platform>(['express'])('shape: a path segment that looks like the header version, on %s', (platform) => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(platform, AppModule, (a) => a.enableVersioning({ type: VersioningType.HEADER, header: 'X-Api-Revision' }));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('Nest routes the two requests to two handlers (the shape is real)', async () => {
    const v2 = await request(app.getHttpServer())
      .post('/partners/v2/orders')
      .set('X-Api-Revision', '2')
      .set('Idempotency-Key', `ctl-a-${Date.now()}`)
      .send({});
    const plain = await request(app.getHttpServer()).post('/partners/v2/orders').set('Idempotency-Key', `ctl-b-${Date.now()}`).send({});
    expect([v2.body.handler, plain.body.handler]).toEqual(['revision 2', 'unversioned']);
  });

  it('revision 2 and the unversioned handler are two operations', async () => {
    await expectApart(
      app,
      { path: '/partners/v2/orders', headers: { 'X-Api-Revision': '2' } },
      { path: '/partners/v2/orders' },
      () => runs,
      'version heuristic',
    );
  });
});
