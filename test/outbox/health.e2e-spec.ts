import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import request from 'supertest';
import { IdempotencyModule, MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { IdempotencyOutboxHealthIndicator } from '../../lib/terminus/index.js';

/**
 * Issue 44, operations: the outbox's backlog and its oldest age as a health check. No
 * ClientProxy is registered under the staged messages' client here, so they wait.
 */
describe('IdempotencyOutboxHealthIndicator (@nestjs/terminus)', () => {
  const store = new MemoryIdempotencyStore();
  let app: INestApplication;

  beforeAll(async () => {
    @Controller()
    class HealthController {
      constructor(
        private readonly health: HealthCheckService,
        private readonly outbox: IdempotencyOutboxHealthIndicator,
      ) {}

      @Get('health')
      @HealthCheck()
      check() {
        return this.health.check([() => this.outbox.isHealthy('outbox', { maxAge: 200 })]);
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
  });

  it('is up with the backlog, and down once the oldest waiting message is older than maxAge', async () => {
    const empty = await request(app.getHttpServer()).get('/health').expect(200);
    expect(empty.body.details.outbox).toEqual({ status: 'up', pending: 0, oldestAgeMs: 0 });
    const run = makeIdempotent(async () => void stageOutboxMessage('NOWHERE', 'e', {}), { store, key: () => 'k', scope: 'health' });
    await run();
    const stagedAt = Date.now();
    const waiting = await request(app.getHttpServer()).get('/health');
    if (Date.now() - stagedAt < 200) expect(waiting.body.details.outbox).toMatchObject({ status: 'up', pending: 1 });
    // Polled until the message is older than maxAge: it cannot leave (its client does not exist).
    let body: { details: { outbox: { status: string; pending: number; message?: string } } } | undefined;
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      const res = await request(app.getHttpServer()).get('/health');
      body = res.body;
      if (res.status === 503) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(body!.details.outbox).toMatchObject({ status: 'down', pending: 1, message: expect.stringMatching(/over maxAge/) });
  });
});
