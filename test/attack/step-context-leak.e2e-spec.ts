import { Controller, Get, Injectable, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { connect } from 'node:net';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, stepKey } from '../../lib/index.js';

/**
 * Where the step context of an @Idempotent() handler reaches (issue 27): only that
 * handler's own execution. The runtime enters its slot with AsyncLocalStorage.enterWith
 * in the caller's context, so, unless the handler is run inside the slot instead, the
 * slot is also what the caller's code (an outer handler calling an @Idempotent provider
 * method) and the caller's caller (the connection a request came on) see afterwards.
 */

/** What stepKey() says, or the name of the error it throws. */
function stepKeyOrError(name: string): string {
  try {
    return stepKey(name);
  } catch (error) {
    return (error as Error).constructor.name;
  }
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

let innerClaimed = deferred();
let innerGate = deferred();
let slowStarted = deferred();
let slowGate = deferred();
let plainSaw = deferred<string>();

@Injectable()
class InnerJobs {
  @Idempotent({ key: (id: string) => id })
  async work(id: string): Promise<string> {
    innerClaimed.resolve();
    await innerGate.promise;
    return id;
  }
}

@Controller()
class LeakController {
  constructor(private readonly jobs: InnerJobs) {}

  @Post('outer')
  @Idempotent()
  async outer() {
    const before = stepKey('charge');
    // An @Idempotent provider method started and awaited later (Promise.all, a fan-out...).
    const inner = this.jobs.work(`job-${before}`);
    await innerClaimed.promise;
    const during = stepKeyOrError('charge');
    innerGate.resolve();
    await inner;
    const after = stepKeyOrError('charge');
    return { before, during, after };
  }

  @Post('slow')
  @Idempotent()
  async slow() {
    slowStarted.resolve();
    await slowGate.promise;
    return { done: true };
  }

  @Get('plain')
  plain() {
    plainSaw.resolve(stepKeyOrError('x'));
    return { ok: true };
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional() {
    plainSaw.resolve(stepKeyOrError('x'));
    return { ok: true };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })],
  controllers: [LeakController],
  providers: [InnerJobs],
})
class LeakModule {}

describe('the step context of an @Idempotent() handler reaches only its own execution', () => {
  let app: INestApplication;
  let port: number;

  beforeAll(async () => {
    app = await NestFactory.create(LeakModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    port = (app.getHttpServer().address() as { port: number }).port;
  });
  afterAll(() => app.close());
  beforeEach(() => {
    innerClaimed = deferred();
    innerGate = deferred();
    slowStarted = deferred();
    slowGate = deferred();
    plainSaw = deferred<string>();
  });

  it("an @Idempotent provider method started by a handler does not take over the handler's steps while it runs", async () => {
    const res = await fetch(`http://127.0.0.1:${port}/outer`, { method: 'POST', headers: { 'idempotency-key': 'outer-1' } });
    expect(res.status).toBe(201);
    const { before, during, after } = (await res.json()) as Record<string, string>;
    // The handler's step key is its own before, while and after the nested execution runs.
    expect(during).toBe(before);
    expect(after).toBe(before);
  });

  it.each([
    ['an undecorated route', 'GET /plain HTTP/1.1'],
    ['a route with required: false, called without a key', 'POST /optional HTTP/1.1'],
  ])('%s on the same connection as a running execution is outside any execution', async (_what, requestLine) => {
    // Two pipelined requests on one keep-alive connection: Node runs the second while the first still runs.
    const socket = connect(port, '127.0.0.1');
    socket.on('data', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(
      'POST /slow HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow-' +
        requestLine.length +
        '\r\nContent-Length: 0\r\n\r\n' +
        `${requestLine}\r\nHost: x\r\nContent-Length: 0\r\n\r\n`,
    );
    try {
      await slowStarted.promise;
      const seen = await plainSaw.promise;
      expect(seen).toBe('IdempotencyConfigurationError');
    } finally {
      slowGate.resolve();
      socket.destroy();
    }
  });
});
