import { Module, type INestApplication, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import request from 'supertest';
import { IdempotencyModule } from '../../lib/index.js';
import { createIdempotencyLogger } from '../../lib/observability/index.js';
import { Effects, buildController } from '../nest/http-app.js';

/** The application logger: what `new Logger('Idempotency')` writes to once Nest uses it. */
class AppLogger implements LoggerService {
  lines: Array<{ level: string; message: string; context: unknown }> = [];
  log = (message: string, context?: unknown) => this.lines.push({ level: 'log', message, context });
  warn = (message: string, context?: unknown) => this.lines.push({ level: 'warn', message, context });
  error = (message: string, ...rest: unknown[]) => this.lines.push({ level: 'error', message, context: rest[rest.length - 1] });
  debug = (message: string, context?: unknown) => this.lines.push({ level: 'debug', message, context });
  verbose = (message: string, context?: unknown) => this.lines.push({ level: 'verbose', message, context });
}

describe('createIdempotencyLogger() in an app, with the default Nest Logger', () => {
  let app: INestApplication;
  const appLogger = new AppLogger();

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ onEvent: createIdempotencyLogger() })],
      controllers: [buildController(new Effects(), { slowMs: 1, failNext: { value: true } })],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: appLogger });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
  });

  it("writes through the application's logger with the Idempotency context", async () => {
    const key = `log-e2e-${process.pid}-${Date.now()}`;
    await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 2 }).expect(422);

    const ours = appLogger.lines.filter((line) => line.context === 'Idempotency');
    expect(ours.map((line) => [line.level, line.message.split(' ').slice(0, 2).join(' ')])).toEqual([
      ['debug', 'claimed PaymentsController.charge'],
      ['debug', 'completed PaymentsController.charge'],
      ['log', 'replayed PaymentsController.charge'],
      ['warn', 'fingerprint_mismatch PaymentsController.charge'],
    ]);
    expect(JSON.stringify(ours)).not.toContain(key);
  });
});
