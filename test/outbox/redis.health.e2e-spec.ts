import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import request from 'supertest';
import { IdempotencyModule, makeIdempotent } from '../../lib/index.js';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import type { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { IdempotencyOutboxHealthIndicator } from '../../lib/terminus/index.js';
import { waitFor } from '../messages/support.js';
import { REDIS_CLIENTS, outboxPrefix, type OpenedRedisStore } from './redis-support.js';

/**
 * Issue 44, operations, on Redis: the backlog and its oldest age, read from the outbox's
 * `pending` sorted set, feed IdempotencyOutboxHealthIndicator as the memory and SQL
 * outboxes do. No ClientProxy is registered under the staged message's client: it waits.
 */
describe('IdempotencyOutboxHealthIndicator on the Redis outbox', () => {
  let opened: OpenedRedisStore;
  let store: RedisIdempotencyStore;
  let app: INestApplication;

  beforeAll(async () => {
    opened = await REDIS_CLIENTS[0]![1]({ prefix: outboxPrefix() });
    store = opened.store;
    @Controller()
    class HealthController {
      constructor(
        private readonly health: HealthCheckService,
        private readonly outbox: IdempotencyOutboxHealthIndicator,
      ) {}

      @Get('health')
      @HealthCheck()
      check() {
        return this.health.check([() => this.outbox.isHealthy('outbox', { maxAge: 300 })]);
      }
    }
    @Module({
      imports: [TerminusModule, IdempotencyModule.forRoot({ store, logger: false, outbox: { retryDelay: 60_000, maxRetryDelay: 60_000 } })],
      controllers: [HealthController],
      providers: [IdempotencyOutboxHealthIndicator],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    await opened?.close();
  });

  it('is up with the backlog, and down once the oldest waiting message is older than maxAge', async () => {
    const empty = await request(app.getHttpServer()).get('/health').expect(200);
    expect(empty.body.details.outbox).toEqual({ status: 'up', pending: 0, oldestAgeMs: 0 });
    const run = makeIdempotent(async () => void stageOutboxMessage('NOWHERE', 'e', {}), { store, key: () => 'k', scope: 'health' });
    await run();
    const stagedAt = Date.now();
    const waiting = await request(app.getHttpServer()).get('/health');
    if (Date.now() - stagedAt < 300) expect(waiting.body.details.outbox).toMatchObject({ status: 'up', pending: 1 });
    let body: { details: { outbox: { status: string; pending: number; oldestAgeMs: number; message?: string } } } | undefined;
    await waitFor(
      'the health check down',
      async () => {
        const res = await request(app.getHttpServer()).get('/health');
        body = res.body;
        return res.status === 503;
      },
      5_000,
    );
    expect(body!.details.outbox).toMatchObject({ status: 'down', pending: 1, message: expect.stringMatching(/over maxAge \(300 ms\)/) });
    expect(body!.details.outbox.oldestAgeMs).toBeGreaterThan(300);
  });
});
