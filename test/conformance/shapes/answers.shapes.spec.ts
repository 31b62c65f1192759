import {
  Catch,
  ClassSerializerInterceptor,
  Controller,
  Module,
  Post,
  Res,
  type ArgumentsHost,
  type ExceptionFilter,
  type INestApplication,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR } from '@nestjs/core';
import { Exclude, Expose } from 'class-transformer';
import { Idempotent, IdempotencyModule } from '../../../lib/index.js';
import { ConformanceStore } from '../conformance.js';
import { bootShape, freshKey, send, type Platform } from './http-shapes.js';

/**
 * The catalogue, what was answered: a replay is what the first caller received, through
 * the application's own answer machinery: `@Res({ passthrough: true })` setting the status
 * and a header, `ClassSerializerInterceptor` hiding a field, and a global exception filter
 * answering a cached domain error with its own status and body.
 */

let runs = 0;

class CardDeclinedError extends Error {
  constructor(readonly declineCode: string) {
    super('card declined');
    this.name = 'CardDeclinedError';
  }
}

@Catch(CardDeclinedError)
class CardDeclinedFilter implements ExceptionFilter {
  catch(error: CardDeclinedError, host: ArgumentsHost) {
    const response = host.switchToHttp().getResponse<{
      status?(code: number): { json?(body: unknown): void; send?(body: unknown): void };
      code?(code: number): { send(body: unknown): void };
    }>();
    const body = { code: 'card_declined', decline: error.declineCode };
    // Express: res.status().json(); Fastify: reply.code().send().
    if (typeof response.code === 'function') response.code(402).send(body);
    else response.status!(402).json!(body);
  }
}

class Account {
  @Expose() id!: string;
  @Exclude() secret!: string;
  constructor(values: Partial<Account>) {
    Object.assign(this, values);
  }
}

@Controller()
class AnswersController {
  @Post('passthrough')
  @Idempotent()
  passthrough(
    @Res({ passthrough: true })
    response: {
      status(code: number): unknown;
      header?(n: string, v: string): unknown;
      setHeader?(n: string, v: string): unknown;
    },
  ) {
    response.status(202);
    if (typeof response.header === 'function') response.header('location', `/jobs/${runs + 1}`);
    else response.setHeader!('location', `/jobs/${runs + 1}`);
    return { job: ++runs };
  }

  @Post('serialized')
  @Idempotent()
  serialized() {
    return new Account({ id: `acct_${++runs}`, secret: 'never-stored' });
  }

  @Post('declined')
  @Idempotent({ cacheErrors: [CardDeclinedError] })
  declined() {
    runs++;
    throw new CardDeclinedError('insufficient_funds');
  }
}

describe.each<Platform>(['express', 'fastify'])('answer shapes on %s', (platform) => {
  let app: INestApplication;
  const store = new ConformanceStore();
  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store })],
      controllers: [AnswersController],
      providers: [
        { provide: APP_INTERCEPTOR, useClass: ClassSerializerInterceptor },
        { provide: APP_FILTER, useClass: CardDeclinedFilter },
      ],
    })
    class AnswersModule {}
    app = await bootShape(platform, AnswersModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  const expectReplayed = async (path: string) => {
    const key = freshKey(`answers ${path}`);
    const first = await send(app, key, { path });
    const before = runs;
    const retry = await send(app, key, { path });
    expect({ status: retry.status, text: retry.text, replayed: retry.replayed }).toEqual({
      status: first.status,
      text: first.text,
      replayed: true,
    });
    expect(runs).toBe(before);
    return first;
  };

  it('@Res({ passthrough: true }) with a status and a Location header', async () => {
    const first = await expectReplayed('/passthrough');
    expect(first.status).toBe(202);
  });

  it('ClassSerializerInterceptor: the replay is the serialized answer, and the hidden field never reaches the store', async () => {
    const first = await expectReplayed('/serialized');
    expect(first.text).not.toContain('never-stored');
    const records = await store.records();
    expect(records.length).toBeGreaterThan(0);
    for (const record of records) expect(record).not.toContain('never-stored');
  });

  it('a cached domain error answered by a global exception filter: 402 first, 402 replayed', async () => {
    const first = await expectReplayed('/declined');
    expect({ status: first.status, body: first.body }).toEqual({
      status: 402,
      body: { code: 'card_declined', decline: 'insufficient_funds' },
    });
  });
});
