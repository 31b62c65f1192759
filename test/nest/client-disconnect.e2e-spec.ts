import type { INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { request as httpRequest, type ClientRequest } from 'node:http';
import type { Socket } from 'node:net';
import { IdempotencyInterceptor, type IdempotencyEvent } from '../../lib/index.js';
import { createHttpApp, type Effects, type Hooks, type Platform } from './http-app.js';

// A real client that goes away mid-request: the outcome of the handler is unknown to the
// client, so the key must never be released (a retry would repeat the effect). The
// handler is held on a gate while the client disconnects and while it retries, so every
// step happens in a known order, whatever the machine's speed.

type Registration = '@Idempotent()' | 'global IdempotencyInterceptor';

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

/** Polls `condition` until it holds; fails with `what` when `deadlineMs` passes first. */
async function until(what: string, condition: () => boolean, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** One POST /charges on a connection of its own (no agent), so destroying it touches nothing else. */
function post(port: number, key: string): { request: ClientRequest; answer: Promise<Answer> } {
  const payload = JSON.stringify({ amount: 5 });
  const request = httpRequest({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: '/charges',
    agent: false,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), 'idempotency-key': key },
  });
  const answer = new Promise<Answer>((resolve, reject) => {
    request.on('error', reject);
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString('utf8') }),
      );
    });
  });
  request.end(payload);
  return { request, answer };
}

describe.each<[Platform, Registration]>([
  ['express', '@Idempotent()'],
  ['express', 'global IdempotencyInterceptor'],
  ['fastify', '@Idempotent()'],
  ['fastify', 'global IdempotencyInterceptor'],
])('a client that disconnects mid-request (%s, %s)', (platform, registration) => {
  let app: INestApplication;
  let effects: Effects;
  let hooks: Hooks;
  let port: number;
  const events: IdempotencyEvent[] = [];
  /** Server-side sockets still open: tells when the server has seen the client go. */
  const serverSockets = new Set<Socket>();

  beforeAll(async () => {
    ({ app, effects, hooks } = await createHttpApp(platform, {
      module: { onEvent: (event) => events.push(event) },
      extraProviders: registration === '@Idempotent()' ? [] : [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }],
    }));
    await app.listen(0, '127.0.0.1');
    const server = app.getHttpServer();
    server.on('connection', (socket: Socket) => {
      serverSockets.add(socket);
      socket.on('close', () => serverSockets.delete(socket));
    });
    port = (server.address() as { port: number }).port;
  });

  afterAll(async () => {
    await app?.close();
  });

  it('keeps the key leased while the handler runs, never releases it, and never runs the handler twice', async () => {
    const key = `disconnect-${process.pid}`; // each describe has an app and a store of its own
    let open!: () => void;
    hooks.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const first = post(port, key);
      const firstOutcome = first.answer.then(
        () => 'answered',
        (error: NodeJS.ErrnoException) => error.code ?? error.message,
      );
      await until('the handler to start', () => effects.count('charge') === 1);
      expect(serverSockets.size).toBe(1);

      first.request.destroy();
      expect(await firstOutcome).toBe('ECONNRESET');
      await until('the server to see the client go', () => serverSockets.size === 0);

      // The handler is still blocked: the key is still leased to it.
      const whileRunning = await post(port, key).answer;
      expect(whileRunning.status).toBe(409);
      expect(whileRunning.headers['retry-after']).toMatch(/^\d+$/);
      expect(JSON.parse(whileRunning.body)).toMatchObject({ code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT' });
      expect(effects.count('charge')).toBe(1);

      open();
      await until('the first execution to settle', () =>
        events.some((e) => e.type === 'completed' || e.type === 'abandoned' || e.type === 'released'),
      );
      expect(events.filter((e) => e.type === 'released')).toEqual([]);
      expect(events.filter((e) => e.type === 'claimed')).toHaveLength(1);

      // Nothing cancels the handler when its client goes (Nest does not unsubscribe on a
      // closed connection), so it finishes, its result is stored, and the retry replays it.
      expect(events.filter((e) => e.type === 'completed')).toHaveLength(1);
      expect(events.filter((e) => e.type === 'abandoned')).toEqual([]);
      const retry = await post(port, key).answer;
      expect(retry.status).toBe(201);
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(JSON.parse(retry.body)).toEqual({ id: 'ch_1', amount: 5 });
      expect(effects.count('charge')).toBe(1);
    } finally {
      open();
      hooks.gate = undefined;
    }
  });
});
