import { Controller, Get, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { connect } from 'node:net';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, stepKey } from '../../lib/index.js';

/**
 * Where the step context of an @Idempotent() handler reaches (issue 27): only that
 * handler's own execution. The runtime enters its slot with AsyncLocalStorage.enterWith
 * in the caller's context; these check that the connection a request came on does not
 * carry it into the next request (pipelined on the same keep-alive connection). The
 * outer handler that calls an @Idempotent provider method does see the nested slot while
 * it runs: see the attack session's notes, pending a change to the runtime.
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

let slowStarted = deferred();
let slowGate = deferred();
let plainSaw = deferred<string>();

@Controller()
class LeakController {
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
    slowStarted = deferred();
    slowGate = deferred();
    plainSaw = deferred<string>();
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
