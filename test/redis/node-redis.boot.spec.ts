import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Injectable, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { createClient, createCluster } from 'redis';
import { IdempotencyConfigurationError, IdempotencyModule, IdempotencyService, Idempotent } from '../../lib/index.js';
import {
  RedisIdempotencyStore,
  recommendedNodeRedisClusterOptions,
  recommendedNodeRedisOptions,
  type NodeRedisClientLike,
  type RedisIdempotencyStoreOptions,
} from '../../lib/redis/index.js';
import { Effects } from '../support/effects.js';
import { freePort, startRedisCluster, startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * The boot wait (docs/redis.md, "At boot") with node-redis: `disableOfflineQueue` refuses
 * every command until the client is ready, and node-redis has no lazyConnect (a client
 * from createClient() opens nothing until connect()), so the store connects it at boot.
 */

const effects = new Effects();

@Injectable()
class ReceiptListener {
  @OnEvent('order.paid')
  @Idempotent({ key: (event: { orderId: string }) => event.orderId })
  async sendReceipt(event: { orderId: string }): Promise<string> {
    effects.hit(event.orderId);
    return `receipt for ${event.orderId}`;
  }
}

const clients: Array<{ destroy(): void }> = [];
const apps: INestApplication[] = [];
const servers: RedisServerHandle[] = [];

function track<T extends { destroy(): void; on(event: 'error', listener: () => void): unknown }>(client: T): T {
  client.on('error', () => undefined); // refused connections are part of these tests
  clients.push(client);
  return client;
}

async function appOn(client: NodeRedisClientLike, options: RedisIdempotencyStoreOptions = {}): Promise<INestApplication> {
  const store = new RedisIdempotencyStore(client, { prefix: `test:boot:${randomUUID()}:`, ...options });
  @Module({
    imports: [EventEmitterModule.forRoot(), IdempotencyModule.forRoot({ store, logger: false })],
    providers: [ReceiptListener],
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  apps.push(app);
  return app;
}

/** Emits the event twice right after boot: the listener must run once, protected. */
async function expectProtectedRightAfterInit(app: INestApplication): Promise<void> {
  const orderId = `order-${randomUUID()}`;
  const emitter = app.get(EventEmitter2);
  await emitter.emitAsync('order.paid', { orderId });
  await emitter.emitAsync('order.paid', { orderId });
  expect(effects.count(orderId)).toBe(1);
  const record = await app.get(IdempotencyService).inspect(orderId, { operation: 'method ReceiptListener.sendReceipt' });
  expect(record?.status).toBe('completed');
}

afterEach(async () => {
  for (const app of apps.splice(0)) await app.close().catch(() => undefined);
  for (const client of clients.splice(0)) client.destroy();
  for (const server of servers.splice(0)) await server.stop();
});

describe('RedisIdempotencyStore waits at boot for a node-redis client', () => {
  it('connects a client that was created but not connected, then protects the first event', async () => {
    const client = track(createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() }));
    const app = await appOn(client);
    expect(client.isOpen).toBe(false);
    await app.init();
    expect(client.isReady).toBe(true);
    await expectProtectedRightAfterInit(app);
  });

  it('waits for a connect() the application started without awaiting it', async () => {
    const client = track(createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() }));
    void client.connect();
    const app = await appOn(client);
    expect(client.isReady).toBe(false);
    await app.init();
    expect(client.isReady).toBe(true);
    await expectProtectedRightAfterInit(app);
  });

  it('waits for a Redis that starts after app.init() began', async () => {
    const port = await freePort();
    const client = track(createClient({ url: `redis://127.0.0.1:${port}`, ...recommendedNodeRedisOptions({ maxReconnectDelay: 100 }) }));
    const app = await appOn(client);
    let booted = false;
    const init = app.init().then(() => (booted = true));
    // Redis is not there yet: the first attempt is refused, and the boot is still waiting.
    const [refused] = (await once(client, 'error')) as [Error];
    expect(refused.message).toMatch(/ECONNREFUSED/);
    expect(booted).toBe(false);
    servers.push(await startRedisServer({ port }));
    await init;
    expect(client.isReady).toBe(true);
    await expectProtectedRightAfterInit(app);
  });

  it('connects a Cluster client at boot and protects the first event', async () => {
    const cluster = await startRedisCluster({ masters: 3 });
    try {
      const client = track(
        createCluster({
          rootNodes: cluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
          ...recommendedNodeRedisClusterOptions(),
        }),
      );
      const app = await appOn(client);
      expect(client.isOpen).toBe(false);
      await app.init();
      expect(client.isReady).toBe(true);
      await expectProtectedRightAfterInit(app);
    } finally {
      for (const app of apps.splice(0)) await app.close();
      for (const client of clients.splice(0)) client.destroy();
      await cluster.stop();
    }
  }, 60_000);

  it('refuses the boot within readyTimeout when Redis never answers, naming what to check', async () => {
    const client = track(
      createClient({ url: `redis://127.0.0.1:${await freePort()}`, ...recommendedNodeRedisOptions({ maxReconnectDelay: 100 }) }),
    );
    const app = await appOn(client, { readyTimeout: 1_500 });
    const started = performance.now();
    const error = await app.init().then(
      () => undefined,
      (e: unknown) => e,
    );
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toMatch(
      /RedisIdempotencyStore: the Redis client was not ready within 1500 ms \(isOpen true, isReady false\).*Last error: connect ECONNREFUSED 127\.0\.0\.1:\d+\..*Check the Redis URL .* and that Redis is up/,
    );
    expect((error as Error).message).toMatch(/readyTimeout: 0/);
    expect(elapsed).toBeGreaterThanOrEqual(1_400);
    expect(elapsed).toBeLessThan(1_500 + 3_000);
  });

  it('refuses at once a client whose reconnectStrategy gives up', async () => {
    const client = track(
      createClient({ url: `redis://127.0.0.1:${await freePort()}`, disableOfflineQueue: true, socket: { reconnectStrategy: false } }),
    );
    const app = await appOn(client);
    const started = performance.now();
    await expect(app.init()).rejects.toThrow(
      /the Redis client has ended .*reconnectStrategy.*Last error: connect ECONNREFUSED.*Check the Redis URL/,
    );
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('readyTimeout: 0 boots at once, without connecting the client', async () => {
    const client = track(createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() }));
    const app = await appOn(client, { readyTimeout: 0 });
    await app.init();
    expect(client.isOpen).toBe(false);
  });
});
