import { randomUUID } from 'node:crypto';
import { Body, Controller, Inject, Module, Post, type INestApplication, type OnApplicationShutdown } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { createClient } from 'redis';
import request from 'supertest';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * An HTTP application whose store is on node-redis, wired as docs/redis.md shows it: a
 * provider creates the client (not connected: the store connects it at boot) and closes
 * it on shutdown. Two instances share one Redis; a replay, a mismatch (422) and an
 * outage (503 within the store's bound, then healed) go through real HTTP.
 */
const REDIS = Symbol('REDIS');
type NodeRedis = ReturnType<typeof createClient>;
let runs = 0;

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  place(@Body() order: { sku: string; quantity: number }) {
    runs += 1;
    return { id: `ord_${randomUUID()}`, ...order };
  }
}

function appModule(url: string, prefix: string) {
  @Module({
    providers: [
      {
        provide: REDIS,
        useFactory: () => {
          const redis = createClient({ url, ...recommendedNodeRedisOptions({ maxReconnectDelay: 100 }) });
          redis.on('error', () => undefined);
          return redis;
        },
      },
    ],
    exports: [REDIS],
  })
  class RedisModule implements OnApplicationShutdown {
    constructor(@Inject(REDIS) private readonly redis: NodeRedis) {}
    onApplicationShutdown(): void {
      this.redis.destroy();
    }
  }

  @Module({
    imports: [
      RedisModule,
      IdempotencyModule.forRootAsync({
        imports: [RedisModule],
        inject: [REDIS],
        useFactory: (redis: NodeRedis) => ({ store: new RedisIdempotencyStore(redis, { prefix }), logger: false }),
      }),
    ],
    controllers: [OrdersController],
  })
  class AppModule {}
  return AppModule;
}

describe('an HTTP app with RedisIdempotencyStore on node-redis', () => {
  let server: RedisServerHandle;
  const apps: INestApplication[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    const prefix = `orders:${randomUUID()}:`;
    for (let i = 0; i < 2; i++) {
      const app = await NestFactory.create(appModule(`redis://127.0.0.1:${server.port}`, prefix), { logger: false });
      await app.init();
      apps.push(app);
    }
  }, 30_000);
  afterAll(async () => {
    for (const app of apps) await app.close();
    await server?.stop();
  });

  const post = (app: INestApplication, key: string, body: object) =>
    request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send(body);

  it('replays a retry on either instance, and refuses the key with another body (422)', async () => {
    const key = randomUUID();
    const before = runs;
    const first = await post(apps[0], key, { sku: 'tea', quantity: 2 });
    expect(first.status).toBe(201);
    const retry = await post(apps[1], key, { sku: 'tea', quantity: 2 });
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.body).toEqual(first.body);
    const other = await post(apps[0], key, { sku: 'tea', quantity: 9 });
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
    expect(runs - before).toBe(1);
  });

  it('answers 503 while Redis is down, without running the handler, and heals when it is back', async () => {
    await server.kill('SIGKILL');
    const before = runs;
    const startedAt = performance.now();
    const down = await post(apps[0], randomUUID(), { sku: 'tea', quantity: 1 });
    expect(down.status).toBe(503);
    expect(down.body.code).toBe('IDEMPOTENCY_STORE_UNAVAILABLE');
    expect(performance.now() - startedAt).toBeLessThan(2_000 + 1_000);
    expect(runs).toBe(before);

    await server.restart();
    const key = randomUUID();
    const deadline = Date.now() + 10_000;
    let healed = await post(apps[0], key, { sku: 'tea', quantity: 1 });
    while (healed.status === 503 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      healed = await post(apps[0], key, { sku: 'tea', quantity: 1 });
    }
    expect(healed.status).toBe(201);
    expect((await post(apps[1], key, { sku: 'tea', quantity: 1 })).headers['idempotent-replayed']).toBe('true');
  });

  it('answers 503 within the store timeout when Redis hangs (SIGSTOP)', async () => {
    server.signal('SIGSTOP');
    try {
      const startedAt = performance.now();
      const hung = await post(apps[1], randomUUID(), { sku: 'tea', quantity: 1 });
      const elapsed = performance.now() - startedAt;
      expect(hung.status).toBe(503);
      expect(elapsed).toBeGreaterThanOrEqual(1_900);
      expect(elapsed).toBeLessThan(2_000 + 2_000);
    } finally {
      server.signal('SIGCONT');
    }
  });
});
