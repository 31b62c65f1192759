import {
  CallHandler,
  Controller,
  ExecutionContext,
  HttpException,
  Injectable,
  Module,
  NestInterceptor,
  Param,
  Post,
  UseInterceptors,
  type INestApplication,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { catchError, map, throwError, type Observable } from 'rxjs';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import {
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  TypeOrmIdempotencyStore,
  getIdempotentEntityManager,
} from '../../lib/typeorm/index.js';
import { RecordingStore } from '../fuzz/recording-store.js';
import { createPgDataSource } from '../typeorm/support.js';

/**
 * The outermost layer when the answer fails after the handler ran (issue 24, item 1):
 * never a second run of an effect that happened, and under `transactional: true` no
 * record and no effect at all.
 */

/** An interceptor whose mapping fails for one route parameter: the answer breaks after the handler. */
@Injectable()
class FragileSerializer implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const broken = context.switchToHttp().getRequest<{ params: { mode?: string } }>().params.mode === 'break';
    return next.handle().pipe(
      map((value: unknown) => {
        if (broken) throw new Error('serializer failed');
        return value;
      }),
    );
  }
}

class CardDeclinedError extends Error {}

/** An interceptor that maps the handler's errors to the application's own error body. */
@Injectable()
class ErrorMapper implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(catchError(() => throwError(() => new HttpException({ error: 'declined', mapped: true }, 402))));
  }
}

@Entity('frame_postings')
class Posting {
  @PrimaryGeneratedColumn()
  id!: number;
  @Column()
  reference!: string;
}

describe('the outermost layer when the answer fails after the handler', () => {
  let runs = 0;

  @Controller()
  @UseInterceptors(FragileSerializer)
  class ChargesController {
    @Post('charges/:mode')
    @Idempotent()
    charge(@Param('mode') mode: string) {
      return { run: ++runs, mode };
    }

    @Post('declines')
    @UseInterceptors(ErrorMapper)
    @Idempotent({ cacheErrors: () => true })
    decline() {
      runs++;
      throw new Error('card declined by the provider');
    }

    @Post('declines-by-class')
    @UseInterceptors(ErrorMapper)
    @Idempotent({ cacheErrors: [CardDeclinedError] })
    declineByClass() {
      runs++;
      throw new CardDeclinedError();
    }
  }

  const store = new RecordingStore();
  @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })], controllers: [ChargesController] })
  class AppModule {}

  let app: INestApplication;
  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });
  afterAll(() => app.close());
  beforeEach(() => {
    runs = 0;
    store.reset();
  });

  it('a handler that ran is not run again when its answer failed outside it: retries are refused as not replayable', async () => {
    const first = await request(app.getHttpServer()).post('/charges/break').set('Idempotency-Key', 'broken-1');
    expect(first.status).toBe(500);
    const retry = await request(app.getHttpServer()).post('/charges/break').set('Idempotency-Key', 'broken-1');
    expect(retry.status).toBe(409);
    expect(retry.body).toMatchObject({ code: 'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE' });
    expect(runs).toBe(1);
  });

  it('with cacheErrors, the stored error is the one the error-mapping interceptor answered with', async () => {
    const first = await request(app.getHttpServer()).post('/declines').set('Idempotency-Key', 'decline-1');
    expect(first.status).toBe(402);
    expect(first.body).toEqual({ error: 'declined', mapped: true });
    const replay = await request(app.getHttpServer()).post('/declines').set('Idempotency-Key', 'decline-1');
    expect(replay.status).toBe(402);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(runs).toBe(1);
    expect(store.results.join()).not.toContain('card declined by the provider');
  });

  it("with cacheErrors as a list of classes, the handler's error selects, and the mapped answer is stored", async () => {
    const first = await request(app.getHttpServer()).post('/declines-by-class').set('Idempotency-Key', 'decline-2');
    expect(first.status).toBe(402);
    const replay = await request(app.getHttpServer()).post('/declines-by-class').set('Idempotency-Key', 'decline-2');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(runs).toBe(1);
  });
});

describe('transactional: true under the outermost layer (TypeORM, PostgreSQL)', () => {
  let runs = 0;

  @Controller()
  @UseInterceptors(FragileSerializer)
  class PostingsController {
    @Post('postings/:mode')
    @Idempotent({ transactional: true })
    async post(@Param('mode') mode: string) {
      runs++;
      const manager = getIdempotentEntityManager();
      await manager.save(manager.create(Posting, { reference: `posting-${mode}` }));
      return { posted: mode };
    }
  }

  let app: INestApplication;
  let database: Awaited<ReturnType<typeof createPgDataSource>>;
  beforeAll(async () => {
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
  const postings = (mode: string) => database.dataSource.getRepository(Posting).countBy({ reference: `posting-${mode}` });
  const records = () => database.dataSource.getRepository(IdempotencyRecordEntity).count();

  it('commits the effect with the record of the answer, and replays it', async () => {
    const first = await request(app.getHttpServer()).post('/postings/ok').set('Idempotency-Key', 'posting-ok');
    expect(first.status).toBe(201);
    const replay = await request(app.getHttpServer()).post('/postings/ok').set('Idempotency-Key', 'posting-ok');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(await postings('ok')).toBe(1);
    expect(runs).toBe(1);
  });

  it('rolls the effect and the record back when the answer fails outside the handler, so a retry runs once more, cleanly', async () => {
    runs = 0;
    const before = await records();
    const first = await request(app.getHttpServer()).post('/postings/break').set('Idempotency-Key', 'posting-break');
    expect(first.status).toBe(500);
    expect(await postings('break')).toBe(0);
    expect(await records()).toBe(before);
    const retry = await request(app.getHttpServer()).post('/postings/break').set('Idempotency-Key', 'posting-break');
    expect(retry.status).toBe(500);
    expect(runs).toBe(2);
    expect(await postings('break')).toBe(0);
  });
});
