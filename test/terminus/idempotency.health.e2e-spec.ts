import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import request from 'supertest';
import { IdempotencyHealthIndicator } from '../../lib/terminus/index.js';
import { IdempotencyModule, type IdempotencyStore } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';

/** The IdempotencyStore methods of a store, without `ping`: health falls back to `get`. */
function withoutPing(store: IdempotencyStore, gets: string[]): IdempotencyStore {
  return {
    claim: (key, req) => store.claim(key, req),
    complete: (key, token, req) => store.complete(key, token, req),
    release: (key, token) => store.release(key, token),
    renew: (key, token, leaseTtl) => store.renew(key, token, leaseTtl),
    get: (key) => {
      gets.push(key);
      return store.get(key);
    },
    delete: (key) => store.delete(key),
  };
}

describe('IdempotencyHealthIndicator (@nestjs/terminus)', () => {
  let app: INestApplication;
  const clients: Redis[] = [];
  const gets: string[] = [];
  let silentServer: Server;
  const silentSockets: Socket[] = [];
  let unreachable: RedisIdempotencyStore;
  let silent: RedisIdempotencyStore;
  let noPing: IdempotencyStore;

  beforeAll(async () => {
    const redis = new Redis({ host: '127.0.0.1', port: 6379 });
    const store = new RedisIdempotencyStore(redis, { prefix: `test:health:${randomUUID()}:` });
    noPing = withoutPing(store, gets);

    // A port where nothing listens: the connection is refused, the client gives up
    // (no retry strategy) and every later command fails at once.
    const down = new Redis({
      host: '127.0.0.1',
      port: await freePort(),
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    down.on('error', () => undefined);
    await new Promise((resolve) => down.once('end', resolve));
    unreachable = new RedisIdempotencyStore(down);

    // A server that accepts connections and never answers: a hung Redis.
    silentServer = createServer((socket) => silentSockets.push(socket));
    await new Promise<void>((resolve) => silentServer.listen(0, '127.0.0.1', resolve));
    const hung = new Redis({ host: '127.0.0.1', port: (silentServer.address() as { port: number }).port, maxRetriesPerRequest: 0 });
    hung.on('error', () => undefined);
    silent = new RedisIdempotencyStore(hung, { timeout: 0 });
    clients.push(redis, down, hung);

    @Controller('health')
    class HealthController {
      constructor(
        private readonly health: HealthCheckService,
        private readonly idempotency: IdempotencyHealthIndicator,
      ) {}
      @Get() @HealthCheck() check() {
        return this.health.check([() => this.idempotency.isHealthy()]);
      }
      @Get('no-ping') @HealthCheck() noPing() {
        return this.health.check([() => this.idempotency.isHealthy('idempotency', { store: noPing })]);
      }
      @Get('down') @HealthCheck() down() {
        return this.health.check([() => this.idempotency.isHealthy('idempotency-store', { store: unreachable })]);
      }
      @Get('hung') @HealthCheck() hung() {
        return this.health.check([() => this.idempotency.isHealthy('idempotency', { store: silent, timeout: 300 })]);
      }
    }
    @Module({
      imports: [TerminusModule.forRoot({ logger: false }), IdempotencyModule.forRoot({ store })],
      controllers: [HealthController],
      providers: [IdempotencyHealthIndicator],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
    for (const socket of silentSockets) socket.destroy();
    // ioredis arms a 2 s timer on disconnect() that only a 'close' of the stream clears:
    // a client whose connection already ended would keep Jest waiting.
    for (const client of clients) if (client.status !== 'end') client.disconnect();
    await new Promise((resolve) => silentServer?.close(resolve));
  });

  it('is up when the store answers its ping', async () => {
    const r = await request(app.getHttpServer()).get('/health');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'ok', info: { idempotency: { status: 'up' } } });
    expect(typeof r.body.info.idempotency.responseTimeMs).toBe('number');
  });

  it('reads a random key when the store has no ping', async () => {
    const before = gets.length;
    const r = await request(app.getHttpServer()).get('/health/no-ping');
    expect(r.status).toBe(200);
    expect(r.body.info.idempotency.status).toBe('up');
    expect(gets.length).toBe(before + 1);
    expect(gets[gets.length - 1]).toMatch(/^[A-Za-z0-9_-]+$/);
  });

  it('is down with the reason (503) when Redis is unreachable', async () => {
    const r = await request(app.getHttpServer()).get('/health/down');
    expect(r.status).toBe(503);
    expect(r.body.status).toBe('error');
    expect(r.body.error['idempotency-store'].status).toBe('down');
    expect(r.body.error['idempotency-store'].message).toEqual(expect.any(String));
  });

  it('is down when the store does not answer within the timeout', async () => {
    const r = await request(app.getHttpServer()).get('/health/hung');
    expect(r.status).toBe(503);
    expect(r.body.error.idempotency).toMatchObject({ status: 'down', message: expect.stringContaining('within 300 ms') });
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}
