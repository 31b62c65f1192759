import 'reflect-metadata';
import { Body, Controller, Get, Headers, HttpCode, Inject, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import request from 'supertest';
import { RedisOneTimeTokenStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';
import {
  MemoryOneTimeTokenStore,
  OneTimeTokenModule,
  OneTimeTokenService,
  RequireOneTimeToken,
  type OneTimeTokenStore,
} from '../../lib/tokens/index.js';

// NestJS 11's Express adapter forces error bodies to application/json (see lib/nest/http.adapter.ts).
const nestMajor = Number(require('@nestjs/core/package.json').version.split('.')[0]);
const problemType = (platform: string) => (platform === 'express' && nestMajor < 12 ? /^application\/json/ : /^application\/problem\+json/);

const scopeOfUser = (user: unknown) => `checkout:${String(user)}`;

function buildApp(store: OneTimeTokenStore) {
  const effects = { orders: 0, forms: 0 };

  @Controller()
  class CheckoutController {
    constructor(@Inject(OneTimeTokenService) private readonly tokens: OneTimeTokenService) {}

    @Get('checkout/token')
    async token(@Headers('x-user') user: string) {
      return { token: await this.tokens.issue(scopeOfUser(user), { ttl: 60_000 }) };
    }

    @Post('checkout')
    @HttpCode(201)
    @RequireOneTimeToken({ scope: (context) => scopeOfUser(context.switchToHttp().getRequest().headers['x-user']) })
    checkout(@Body() body: { amount: number }) {
      return { order: ++effects.orders, amount: body.amount };
    }

    @Post('newsletter')
    @HttpCode(200)
    @RequireOneTimeToken({ header: 'X-Form-Token', bodyField: 'formToken' })
    subscribe() {
      return { subscribed: ++effects.forms };
    }
  }

  @Module({ imports: [OneTimeTokenModule.forRoot({ store })], controllers: [CheckoutController] })
  class AppModule {}

  return { AppModule, effects };
}

const redisClients: Redis[] = [];
afterAll(() => {
  for (const client of redisClients) client.disconnect();
});

const variants: [string, 'express' | 'fastify', () => Promise<OneTimeTokenStore>][] = [
  ['Express + memory store', 'express', async () => new MemoryOneTimeTokenStore()],
  [
    'Express + Redis store',
    'express',
    async () => {
      const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
      redisClients.push(client);
      await client.connect();
      return new RedisOneTimeTokenStore(client, { prefix: `test:ott-guard:${randomUUID()}:` });
    },
  ],
  ['Fastify + memory store', 'fastify', async () => new MemoryOneTimeTokenStore()],
];

describe.each(variants)('@RequireOneTimeToken on %s', (_name, platform, makeStore) => {
  let app: INestApplication;
  let url: string;
  let effects: { orders: number; forms: number };
  let tokens: OneTimeTokenService;

  beforeAll(async () => {
    const built = buildApp(await makeStore());
    effects = built.effects;
    app =
      platform === 'fastify'
        ? await NestFactory.create(built.AppModule, new FastifyAdapter(), { logger: false })
        : await NestFactory.create(built.AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
    tokens = app.get(OneTimeTokenService);
  });
  afterAll(async () => {
    await app?.close();
  });

  async function issue(user: string): Promise<string> {
    const response = await request(url).get('/checkout/token').set('x-user', user).expect(200);
    return response.body.token;
  }

  it('accepts exactly one of 50 concurrent submissions of one token', async () => {
    const token = await issue('u1');
    const before = effects.orders;
    const responses = await Promise.all(
      Array.from({ length: 50 }, () => request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', token).send({ amount: 5 })),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s >= 200 && s < 300)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(49);
    expect(effects.orders - before).toBe(1);
  });

  it('answers a reused token with 409 problem+json', async () => {
    const token = await issue('u1');
    await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', token).send({ amount: 1 }).expect(201);
    const reused = await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', token).send({ amount: 1 });
    expect(reused.status).toBe(409);
    expect(reused.headers['content-type']).toMatch(problemType(platform));
    expect(reused.body).toMatchObject({ status: 409, code: 'IDEMPOTENCY_TOKEN_USED', detail: expect.stringMatching(/already been used/) });
    expect(reused.body.hint).toEqual(expect.any(String));
  });

  it('answers an unknown token, or one of another user, with 422', async () => {
    const forged = await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', 'forged').send({});
    expect(forged.status).toBe(422);
    expect(forged.body).toMatchObject({ status: 422, code: 'IDEMPOTENCY_TOKEN_INVALID' });
    const othersToken = await issue('u2');
    const stolen = await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', othersToken).send({});
    expect(stolen.status).toBe(422);
    // Still valid for its owner.
    await request(url).post('/checkout').set('x-user', 'u2').set('One-Time-Token', othersToken).send({ amount: 1 }).expect(201);
  });

  it('answers a missing token with 400 naming where to send it', async () => {
    const before = effects.orders;
    const missing = await request(url).post('/checkout').set('x-user', 'u1').send({});
    expect(missing.status).toBe(400);
    expect(missing.headers['content-type']).toMatch(problemType(platform));
    expect(missing.body).toMatchObject({ code: 'IDEMPOTENCY_TOKEN_MISSING', detail: expect.stringMatching(/One-Time-Token header/) });
    expect(effects.orders).toBe(before);
  });

  it('reads the token from a custom header or a body field', async () => {
    const viaBody = await tokens.issue();
    await request(url).post('/newsletter').send({ formToken: viaBody }).expect(200);
    await request(url).post('/newsletter').send({ formToken: viaBody }).expect(409);
    const viaHeader = await tokens.issue();
    await request(url).post('/newsletter').set('X-Form-Token', viaHeader).send({}).expect(200);
    const missing = await request(url).post('/newsletter').send({});
    expect(missing.status).toBe(400);
    expect(missing.body.detail).toMatch(/X-Form-Token header or the body field "formToken"/);
  });
});

describe('@RequireOneTimeToken while the token store is down', () => {
  let server: RedisServerHandle;
  let client: Redis;
  let app: INestApplication;
  let url: string;
  let effects: { orders: number };

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, ...recommendedRedisOptions({ maxReconnectDelay: 200 }) });
    client.on('error', () => undefined);
    await client.connect();
    const built = buildApp(new RedisOneTimeTokenStore(client));
    effects = built.effects;
    app = await NestFactory.create(built.AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });
  afterAll(async () => {
    await app?.close();
    client?.disconnect();
    await server?.stop();
  });

  it('fails closed with 503 problem+json, and accepts tokens again once Redis is back', async () => {
    const token = (await request(url).get('/checkout/token').set('x-user', 'u1').expect(200)).body.token;
    await server.kill('SIGKILL');
    const down = await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', token).send({ amount: 1 });
    expect(down.status).toBe(503);
    expect(down.headers['content-type']).toMatch(problemType('express'));
    expect(down.body).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
    expect(effects.orders).toBe(0);

    await server.restart(); // empty: the old token is gone with the data
    let fresh: request.Response;
    const deadline = Date.now() + 15_000;
    do {
      await new Promise((resolve) => setTimeout(resolve, 100));
      fresh = await request(url).get('/checkout/token').set('x-user', 'u1');
    } while (fresh.status !== 200 && Date.now() < deadline);
    expect(fresh.status).toBe(200);
    await request(url).post('/checkout').set('x-user', 'u1').set('One-Time-Token', fresh.body.token).send({ amount: 1 }).expect(201);
    expect(effects.orders).toBe(1);
  });
});
