import {
  Controller,
  Injectable,
  Module,
  Post,
  UseInterceptors,
  type CallHandler,
  type INestApplication,
  type NestInterceptor,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { timeout, type Observable } from 'rxjs';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, type IdempotencyEvent } from '../../lib/index.js';
import {
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  TypeOrmIdempotencyStore,
  getIdempotentEntityManager,
} from '../../lib/typeorm/index.js';
import { createPgDataSource } from '../typeorm/support.js';

/**
 * An application interceptor inside the outermost layer gives up on the handler
 * (`timeout()`): the caller gets that error while the handler still runs. When the
 * handler ends, its execution is settled with what the caller got (not replayable: its
 * effect happened, its answer was not sent), not left leased and renewed for as long as
 * the process lives, answering every retry "in flight".
 */
@Injectable()
class GiveUpInterceptor implements NestInterceptor {
  intercept(_context: unknown, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(50));
  }
}

/** Sends again while the key is in flight, up to a deadline: the first run's settlement is asynchronous. */
async function retryWhileInFlight(send: () => request.Test): Promise<request.Response> {
  const deadline = Date.now() + 5_000;
  let retry = await send();
  while (retry.body.code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT' && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    retry = await send();
  }
  return retry;
}

describe('the chain ends before the handler (an inner timeout())', () => {
  let app: INestApplication;
  let release!: () => void;
  let handlerEnded!: Promise<void>;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    let ended!: () => void;
    handlerEnded = new Promise<void>((resolve) => (ended = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));

    @Controller()
    @UseInterceptors(GiveUpInterceptor)
    class SlowController {
      @Post('reports')
      @Idempotent()
      async create() {
        await gate;
        ended();
        return { report: 'done' };
      }
    }

    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), onEvent: (event) => void events.push(event) })],
      controllers: [SlowController],
    })
    class AppModule {}

    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });
  afterAll(() => app?.close());

  it('settles the execution as not replayable once the handler ends; retries never run it again', async () => {
    const send = () => request(app.getHttpServer()).post('/reports').set('Idempotency-Key', 'r-1').send({});
    const first = await send();
    expect(first.status).toBe(500);
    expect((await send()).body.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');

    release();
    await handlerEnded;
    const retry = await retryWhileInFlight(send);
    expect(retry.status).toBe(409);
    expect(retry.body.code).toBe('IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE');
    expect(events.map((event) => event.type)).toContain('completed');
  });
});

@Entity('timeout_postings')
class Posting {
  @PrimaryGeneratedColumn()
  id!: number;
  @Column()
  reference!: string;
}

describe('the chain ends before a transactional handler (an inner timeout(); TypeORM, PostgreSQL)', () => {
  let app: INestApplication;
  let database: Awaited<ReturnType<typeof createPgDataSource>>;
  let release!: () => void;
  let firstEnded!: Promise<void>;
  let runs = 0;

  beforeAll(async () => {
    let ended!: () => void;
    firstEnded = new Promise<void>((resolve) => (ended = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));

    @Controller()
    @UseInterceptors(GiveUpInterceptor)
    class PostingsController {
      @Post('postings')
      @Idempotent({ transactional: true })
      async post() {
        runs++;
        await gate;
        const manager = getIdempotentEntityManager();
        await manager.save(manager.create(Posting, { reference: 'posting-1' }));
        if (runs === 1) ended();
        return { posted: true };
      }
    }

    database = await createPgDataSource({ entities: [IdempotencyRecordEntity, IdempotencyStepEntity, Posting] });
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new TypeOrmIdempotencyStore(database.dataSource), logger: false })],
      controllers: [PostingsController],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    await database?.destroy();
  });

  it('rolls the first run back once the handler ends (its caller got the timeout), so a retry runs cleanly', async () => {
    const send = () => request(app.getHttpServer()).post('/postings').set('Idempotency-Key', 'p-1').send({});
    expect((await send()).status).toBe(500);
    release();
    await firstEnded;
    const retry = await retryWhileInFlight(send);
    expect(retry.status).toBe(201);
    expect(runs).toBe(2);
    expect(await database.dataSource.getRepository(Posting).countBy({ reference: 'posting-1' })).toBe(1);
  });
});
