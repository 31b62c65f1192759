import { Controller, Get, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { SwaggerModule } from '@nestjs/swagger';
import { Test } from '@nestjs/testing';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Idempotent, IdempotencyConfigurationError, IdempotencyModule } from '../../lib/index.js';
import { CONTROLLERS, PaymentDto, PaymentsController, createApp, documentOf, operationOf, type Platform } from './openapi-app.js';

const nestMajor = Number(require('@nestjs/core/package.json').version.split('.')[0]);

const apps: INestApplication[] = [];
async function open(platform: Platform, ...args: Parameters<typeof createApp> extends [Platform, ...infer R] ? R : never) {
  const app = await createApp(platform, ...args);
  apps.push(app);
  return app;
}
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

describe.each<Platform>(['express', 'fastify'])('OpenAPI documentation and the module options (%s)', (platform) => {
  it("documents the module's header and ttl; a route's own header still wins", async () => {
    const app = await open(platform, { module: { header: 'X-Idempotency-Key', ttl: 7 * 24 * 60 * 60 * 1000 } });
    const document = documentOf(app);
    const create = operationOf(document, 'post', '/payments');
    expect(create.parameters).toEqual([expect.objectContaining({ name: 'X-Idempotency-Key', in: 'header', required: true })]);
    expect(create.parameters[0].description).toContain('within 7 days of the first answer');
    expect(create['x-idempotent']).toEqual({ header: 'X-Idempotency-Key', required: true, ttl: 604_800_000 });
    expect(create.responses[400].description).toContain('no idempotency key in the X-Idempotency-Key header');
    // Its own header and ttl, over the module's.
    expect(operationOf(document, 'put', '/payments/{id}')['x-idempotent']).toEqual({
      header: 'X-Request-Key',
      required: false,
      ttl: 3_600_000,
    });
  });

  it("documents the module's required: false and onStoreError: 'fail-open'", async () => {
    const app = await open(platform, { module: { required: false, onStoreError: 'fail-open' } });
    const create = operationOf(documentOf(app), 'post', '/payments');
    expect(create.parameters[0].required).toBe(false);
    expect(Object.keys(create.responses)).toEqual(['201', '400', '409', '422']);
  });

  it('reads the options forRootAsync resolved, before init()', async () => {
    const module = IdempotencyModule.forRootAsync({
      useFactory: async () => {
        await new Promise((resolve) => setImmediate(resolve));
        return { header: 'X-Async-Key', ttl: 90_000 };
      },
    });
    const app = await open(platform, { module });
    const create = operationOf(documentOf(app), 'post', '/payments');
    expect(create['x-idempotent']).toEqual({ header: 'X-Async-Key', required: true, ttl: 90_000 });
    expect(create.parameters[0].description).toContain('within 90 s of the first answer');
  });

  it('openApi: false leaves the document as the application describes it, also after an application that documented it', async () => {
    const documented = await open(platform);
    expect(operationOf(documentOf(documented), 'post', '/payments')['x-idempotent']).toBeDefined();
    const app = await open(platform, { module: { openApi: false } });
    const document = documentOf(app);
    expect(operationOf(document, 'post', '/payments')).toEqual({
      operationId: 'PaymentsController_create',
      parameters: [],
      responses: { 201: { description: '' } },
      tags: ['Payments'],
    });
    expect(operationOf(document, 'post', '/payments/documented').parameters).toEqual([
      { name: 'idempotency-key', in: 'header', required: true, description: 'Our own words about the key.', schema: { type: 'string' } },
    ]);
    expect(Object.keys(operationOf(document, 'post', '/payments/documented').responses)).toEqual(['201', '409']);
    expect(document.components?.schemas?.IdempotencyProblem).toBeUndefined();
  });

  it('rebuilds each application from its own options, leaving nothing of the one before', async () => {
    const first = await open(platform, { module: { header: 'X-First-Key' } });
    const firstDocument = documentOf(first);
    const second = await open(platform, { module: { header: 'X-Second-Key', onStoreError: 'fail-open' } });
    const create = operationOf(documentOf(second), 'post', '/payments');
    expect(create.parameters).toEqual([expect.objectContaining({ name: 'X-Second-Key' })]);
    expect(Object.keys(create.responses)).toEqual(['201', '400', '409', '422']);
    expect(operationOf(firstDocument, 'post', '/payments').parameters).toEqual([expect.objectContaining({ name: 'X-First-Key' })]);
  });

  it('documents each controller with the IdempotencyModule that serves it', async () => {
    @Controller('feature')
    class FeatureController {
      @Post()
      @Idempotent()
      create() {
        return {};
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ header: 'X-Feature-Key' })], controllers: [FeatureController] })
    class FeatureModule {}
    @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true }), FeatureModule], controllers: [PaymentsController] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    apps.push(app);
    const document = documentOf(app);
    expect(operationOf(document, 'post', '/feature')['x-idempotent'].header).toBe('X-Feature-Key');
    expect(operationOf(document, 'post', '/payments')['x-idempotent'].header).toBe('Idempotency-Key');
    await app.init();
  });
});

describe('OpenAPI documentation: other ways to build the application', () => {
  it('works with a testing module compiled before its HTTP adapter is chosen', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [IdempotencyModule.forRoot()], controllers: CONTROLLERS }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    apps.push(app);
    const { content } = operationOf(documentOf(app), 'post', '/payments').responses[422];
    // NestJS 11 sends problem bodies as application/json on Express and +json on Fastify: both, when not yet known.
    expect(Object.keys(content)).toEqual(nestMajor >= 12 ? ['application/problem+json'] : ['application/problem+json', 'application/json']);
  });

  it("keeps the CLI plugin's return type loaded after create() (SwaggerModule.loadPluginMetadata, as under SWC)", async () => {
    @Controller('late')
    class LateController {
      @Post()
      @Idempotent()
      create() {
        return { id: 'pay_late', amount: 1 };
      }

      @Get()
      list() {
        return [];
      }
    }
    const app = await createApp('express', { controllers: [LateController] });
    apps.push(app);
    // What the plugin's generated metadata.ts holds, loaded as Nest's docs show it: after create().
    await SwaggerModule.loadPluginMetadata(async () => ({
      '@nestjs/swagger': {
        models: [],
        controllers: [
          [Promise.resolve({ LateController }), { LateController: { create: { type: PaymentDto }, list: { type: [PaymentDto] } } }],
        ],
      },
    }));
    const document = documentOf(app);
    expect(operationOf(document, 'post', '/late').responses[201]).toEqual({
      description: '',
      headers: { 'Idempotent-Replayed': expect.any(Object) },
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
    expect(operationOf(document, 'get', '/late').responses[200].content['application/json'].schema).toEqual({
      type: 'array',
      items: { $ref: '#/components/schemas/PaymentDto' },
    });
  });

  it('refuses an openApi option that is not a boolean when the application is created', async () => {
    await expect(createApp('express', { module: { openApi: 'yes' as unknown as boolean } })).rejects.toThrow(IdempotencyConfigurationError);
    await expect(createApp('express', { module: { openApi: 'yes' as unknown as boolean } })).rejects.toThrow(
      /openApi must be true or false/,
    );
  });

  it('leaves a route with invalid options to init(), which names it as before', async () => {
    @Controller('broken')
    class BrokenController {
      @Post()
      @Idempotent({ ttl: 1000, leaseTtl: 5000 })
      create() {
        return {};
      }
    }
    const app = await createApp('express', { controllers: [BrokenController] });
    apps.push(app);
    expect(operationOf(documentOf(app), 'post', '/broken')).not.toHaveProperty('x-idempotent');
    await expect(app.init()).rejects.toThrow(/BrokenController\.create.*leaseTtl/);
  });

  it('never loads @nestjs/swagger in an application that does not use it', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--require', require.resolve('../support/ts-require.js'), require.resolve('./fixtures/without-swagger.ts')],
      { timeout: 60_000 },
    );
    expect(stdout.trim()).toBe('ok 201 {"id":"pay_1"}');
  });
});
