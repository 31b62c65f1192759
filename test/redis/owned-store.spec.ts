import { randomUUID } from 'node:crypto';
import { Controller, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import request from 'supertest';
import { IdempotencyConfigurationError, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { createRedisIdempotencyStore, RedisIdempotencyStore } from '../../lib/redis/index.js';
import { freePort } from '../support/redis-servers.js';
import { waitFor } from '../messages/support.js';

/**
 * Issue 43: the owned-client path of the Redis store. `createRedisIdempotencyStore({ url })`
 * makes the ioredis client with the recommended options, the module waits for it at boot,
 * and closing the module ends it: nothing of the client is the application's to manage.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

let runs = 0;
@Controller('payments')
class PaymentsController {
  @Post()
  @Idempotent()
  create() {
    return { id: `pay_${++runs}` };
  }
}

/** The client the store made (not public: the store owns it). */
const clientOf = (store: RedisIdempotencyStore) => (store as unknown as { scripts: { client: { status: string } } }).scripts.client;

async function appOn(
  url: string,
  options: { readyTimeout?: number } = {},
): Promise<{ app: INestApplication; store: RedisIdempotencyStore }> {
  let store!: RedisIdempotencyStore;
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        isGlobal: true,
        useFactory: async () => {
          store = await createRedisIdempotencyStore({ url, prefix: `owned-${randomUUID()}:`, ...options });
          return { store, logger: false };
        },
      }),
    ],
    controllers: [PaymentsController],
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  return { app, store };
}

describe('createRedisIdempotencyStore: a store that owns its client', () => {
  it('serves a request and its retry with the client it made, and app.close() ends that client', async () => {
    const { app, store } = await appOn(REDIS_URL);
    await app.init();
    const client = clientOf(store);
    expect(client.status).toBe('ready');
    const key = randomUUID();
    const first = await request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).expect(201);
    const retry = await request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).expect(201);
    expect(retry.body).toEqual(first.body);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    await app.close();
    await waitFor('the owned client to end', () => client.status === 'end', 5_000);
  });

  it('waits for Redis at boot: a server that is not there stops app.init() after readyTimeout, and the client is ended', async () => {
    const { app, store } = await appOn(`redis://127.0.0.1:${await freePort()}`, { readyTimeout: 500 });
    try {
      await expect(app.init()).rejects.toThrow(IdempotencyConfigurationError);
    } finally {
      await app.close();
    }
    // Ended while reconnecting: no socket to close, so ioredis leaves its status as it was, but tries no more.
    const client = clientOf(store) as unknown as { on(event: string, listener: () => void): unknown };
    let attempts = 0;
    client.on('reconnecting', () => attempts++);
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(attempts).toBe(0);
  });

  it('refuses a url that is not a redis:// or rediss:// URL, naming the option', async () => {
    await expect(createRedisIdempotencyStore({ url: 'localhost:6379' })).rejects.toThrow(
      /createRedisIdempotencyStore: url must be a redis:\/\/ or rediss:\/\/ URL, got 'localhost:6379'/,
    );
  });
});
