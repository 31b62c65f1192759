import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Injectable, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { Cluster, Redis } from 'ioredis';
import { IdempotencyConfigurationError, IdempotencyModule, IdempotencyService, Idempotent } from '../../lib/index.js';
import {
  RedisIdempotencyStore,
  recommendedRedisClusterOptions,
  recommendedRedisOptions,
  type RedisIdempotencyStoreOptions,
} from '../../lib/redis/index.js';
import type { RedisClientLike } from '../../lib/redis/redis-client.js';
import { Effects } from '../support/effects.js';
import { freePort, startRedisCluster, startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * Issue 26: with `recommendedRedisOptions()` (no offline queue) the client refuses every
 * command until it is ready, so the events, ticks and requests right after `app.init()`
 * failed as an outage. The store's boot check now waits for a connecting client.
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

const clients: Array<{ disconnect(): void; status: string }> = [];
const apps: INestApplication[] = [];
const servers: RedisServerHandle[] = [];

function track<T extends { disconnect(): void; status: string; on(event: string, listener: () => void): unknown }>(client: T): T {
  client.on('error', () => undefined); // refused connections are part of these tests
  clients.push(client);
  return client;
}

/** An application built around `client`; `app.init()` is the caller's, so it can time it. */
async function appOn(client: RedisClientLike, options: RedisIdempotencyStoreOptions = {}): Promise<INestApplication> {
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
  // And IdempotencyService.run, right after boot too.
  const key = randomUUID();
  const service = app.get(IdempotencyService);
  expect(await service.run(key, () => effects.hit(key))).toBe(1);
  expect(await service.run(key, () => effects.hit(key))).toBe(1);
}

/**
 * A client of a port where nothing listens, reconnecting every 100 ms until the test
 * ends. It is then left to end by itself (its retryStrategy gives up): ioredis's
 * disconnect() between two attempts arms a 2 s timer that nothing clears.
 */
let ending = false;
function deadPortClient(port: number): Redis {
  return track(new Redis({ host: '127.0.0.1', port, ...recommendedRedisOptions(), retryStrategy: () => (ending ? null : 100) }));
}

afterEach(async () => {
  for (const app of apps.splice(0)) await app.close().catch(() => undefined);
  ending = true;
  for (const client of clients.splice(0)) {
    if (client.status === 'end') continue;
    if (client.status === 'reconnecting' || client.status === 'connecting')
      await new Promise((resolve) => (client as Redis).once('end', resolve));
    else client.disconnect();
  }
  ending = false;
  for (const server of servers.splice(0)) await server.stop();
});

describe('RedisIdempotencyStore waits at boot for a client still connecting', () => {
  it('protects an event and a run() right after app.init() with a client made with recommendedRedisOptions()', async () => {
    const client = track(new Redis({ host: '127.0.0.1', port: 6379, ...recommendedRedisOptions() }));
    const app = await appOn(client);
    expect(client.status).not.toBe('ready');
    await app.init();
    expect(client.status).toBe('ready');
    await expectProtectedRightAfterInit(app);
  });

  it('connects a lazyConnect client at boot', async () => {
    const client = track(new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() }));
    const app = await appOn(client);
    expect(client.status).toBe('wait');
    await app.init();
    await expectProtectedRightAfterInit(app);
  });

  it('waits for a Redis that starts after app.init() began', async () => {
    const port = await freePort();
    const client = track(new Redis({ host: '127.0.0.1', port, ...recommendedRedisOptions({ maxReconnectDelay: 100 }) }));
    const app = await appOn(client);
    let booted = false;
    const init = app.init().then(() => (booted = true));
    // Redis is not there yet: the first attempt is refused, and the boot is still waiting.
    const [refused] = (await once(client, 'error')) as [Error];
    expect(refused.message).toMatch(/ECONNREFUSED/);
    expect(booted).toBe(false);
    servers.push(await startRedisServer({ port }));
    await init;
    expect(client.status).toBe('ready');
    await expectProtectedRightAfterInit(app);
  });

  it('protects the first run() on a Cluster client that is still discovering its slots', async () => {
    const cluster = await startRedisCluster({ masters: 3 });
    try {
      const client = track(new Cluster(cluster.nodes, recommendedRedisClusterOptions()));
      const app = await appOn(client);
      expect(client.status).not.toBe('ready');
      await app.init();
      expect(client.status).toBe('ready');
      await expectProtectedRightAfterInit(app);
    } finally {
      for (const app of apps.splice(0)) await app.close();
      for (const client of clients.splice(0)) client.disconnect();
      await cluster.stop();
    }
  }, 60_000);

  it('refuses the boot within readyTimeout when Redis never answers, naming what to check', async () => {
    const client = deadPortClient(await freePort());
    const app = await appOn(client, { readyTimeout: 1_500 });
    const started = Date.now();
    const error = await app.init().then(
      () => undefined,
      (e: unknown) => e,
    );
    const elapsed = Date.now() - started;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toMatch(
      /RedisIdempotencyStore: the Redis client was not ready within 1500 ms \(status '(connecting|reconnecting|close)'\).*Last error: connect ECONNREFUSED 127\.0\.0\.1:\d+\..*Check the Redis URL .* and that Redis is up/,
    );
    expect((error as Error).message).toMatch(/readyTimeout: 0/);
    expect(elapsed).toBeGreaterThanOrEqual(1_400);
    expect(elapsed).toBeLessThan(1_500 + 3_000);
  });

  it('refuses at once a client that has already ended', async () => {
    const port = await freePort();
    const client = track(new Redis({ host: '127.0.0.1', port, retryStrategy: () => null }));
    await new Promise((resolve) => client.once('end', resolve));
    const app = await appOn(client);
    await expect(app.init()).rejects.toThrow(/the Redis client has ended .*Check the Redis URL/);
  });

  it('readyTimeout: 0 boots at once, without waiting (as before)', async () => {
    const client = deadPortClient(await freePort());
    const app = await appOn(client, { readyTimeout: 0 });
    await app.init();
    expect(client.status).not.toBe('ready');
  });

  it('pings a client without a status (not ioredis) at boot', async () => {
    const real = track(new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true }));
    await real.connect();
    let pings = 0;
    const structural: RedisClientLike = {
      eval: (script, numkeys, ...args) => real.eval(script, numkeys, ...args),
      evalsha: (sha, numkeys, ...args) => real.evalsha(sha, numkeys, ...args),
      ping: () => (pings++, real.ping()),
    };
    const app = await appOn(structural);
    await app.init();
    expect(pings).toBe(1);
    await expectProtectedRightAfterInit(app);
  });

  it('checks readyTimeout', () => {
    const client = track(new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true }));
    expect(() => new RedisIdempotencyStore(client, { readyTimeout: -1 })).toThrow(
      /RedisIdempotencyStore: readyTimeout must be a whole number of milliseconds 0 or more, got -1/,
    );
  });
});
