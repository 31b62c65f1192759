import { Module, type INestApplication, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { IoAdapter } from '@nestjs/platform-socket.io';
import { WsAdapter } from '@nestjs/platform-ws';
import {
  ConnectedSocket,
  MessageBody,
  SubscribeMessage,
  WebSocketGateway,
  WsException,
  type OnGatewayConnection,
  type OnGatewayInit,
} from '@nestjs/websockets';
import type { IncomingMessage } from 'node:http';
import { io, type Socket as IoClient } from 'socket.io-client';
import { WebSocket } from 'ws';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule, isIdempotencyRpcError } from '../../lib/index.js';
import { freePort } from '../messages/support.js';
import { Effects } from '../support/effects.js';
import { entryId } from './drivers.js';
import { CONFIGURATION, Hold, IN_FLIGHT, KEY_MISSING, MISMATCH, UNREADABLE, type Answer, type ConformanceDriver } from './conformance.js';
import { StepProbe } from './steps.js';

/**
 * `@SubscribeMessage()` handlers of `@WebSocketGateway()`s on both Nest adapters, over
 * real sockets: socket.io (`@nestjs/platform-socket.io`, the answer is the acknowledgement
 * of `emitWithAck`) and ws (`@nestjs/platform-ws`, the answer is the message the gateway
 * sends back). The key is the `key` option over the message (`data.ref`). The principal is
 * where gateway applications put it: socket.io middleware sets `client.data.user` from the
 * handshake's `auth.token`; a ws gateway's `handleConnection` sets `client.user` from the
 * upgrade request's `Authorization` header. Every call opens a socket of its own, so the
 * calls of one principal also prove that two sockets of one user share the key space.
 */
export type GatewayPlatform = 'socket.io' | 'ws';

interface Message {
  readonly ref?: string;
  readonly input: unknown;
}

/** What the client saw: the acknowledgement (socket.io) or reply (ws), an event the gateway sent, or Nest's `exception` event. */
export type WsSeen =
  | { readonly kind: 'ack'; readonly value: unknown }
  | { readonly kind: 'event'; readonly event: string; readonly data: unknown }
  | { readonly kind: 'exception'; readonly data: unknown };

const STATUS_OF: Record<string, number> = { [MISMATCH]: 422, [KEY_MISSING]: 400, [IN_FLIGHT]: 409, [CONFIGURATION]: 500 };
const options = { key: (message: Message) => message.ref };

/** The user a token stands for: UNREADABLE is a user object without an id. */
function userOf(token: string | undefined): object | undefined {
  if (!token) return undefined;
  return token === UNREADABLE ? { name: 'no id' } : { id: token };
}

function describeSeen(seen: WsSeen): string {
  return JSON.stringify(seen);
}

export function wsDriver(platform: GatewayPlatform, driverOptions: { interceptor?: boolean } = {}): ConformanceDriver<unknown, WsSeen> {
  const effects = new Effects();
  const hold = new Hold();
  const stepProbe = new StepProbe();
  /** Who sent the message, as the handler sees it. */
  const principalOf = (client: { data?: { user?: { id?: string } }; user?: { id?: string } }) =>
    platform === 'socket.io' ? client.data?.user?.id : client.user?.id;
  const answer = (operation: string, client: object): Answer => ({
    operation,
    principal: principalOf(client),
    run: effects.hit(operation),
  });

  /** socket.io middleware on the gateway's namespace; ws: the upgrade request's header, read once per connection. */
  class Authenticating implements OnGatewayInit, OnGatewayConnection {
    afterInit(server: { use?: (fn: (socket: any, next: () => void) => void) => void }) {
      if (platform !== 'socket.io') return;
      server.use!((socket, next) => {
        const user = userOf(socket.handshake.auth?.token as string | undefined);
        if (user) socket.data.user = user;
        next();
      });
    }

    handleConnection(client: { user?: object }, request?: IncomingMessage) {
      if (platform !== 'ws') return;
      const user = userOf(request?.headers.authorization?.replace(/^Bearer /, ''));
      if (user) client.user = user;
    }
  }

  const where = (name: string) => (platform === 'socket.io' ? { namespace: name } : { path: name });

  @WebSocketGateway(where('/conf'))
  class ConformanceGateway extends Authenticating {
    @SubscribeMessage('refund')
    @Idempotent(options)
    refund(@MessageBody() _message: Message, @ConnectedSocket() client: object) {
      return answer('refund', client);
    }

    @SubscribeMessage('credit')
    @Idempotent(options)
    credit(@MessageBody() _message: Message, @ConnectedSocket() client: object) {
      return answer('credit', client);
    }

    @SubscribeMessage('held')
    @Idempotent({ ...options, inFlight: 'reject' })
    async held(@MessageBody() _message: Message, @ConnectedSocket() client: object) {
      const value = answer('held', client);
      await hold.gate;
      return value;
    }

    @SubscribeMessage('steps')
    @Idempotent(options)
    async steps(@MessageBody() _message: Message, @ConnectedSocket() client: object) {
      await stepProbe.run();
      return answer('steps', client);
    }

    @SubscribeMessage('decline')
    @Idempotent({ ...options, cacheErrors: (error) => error instanceof WsException })
    decline() {
      throw new WsException({ status: 'error', code: 'REFUND_DECLINED', run: effects.hit('decline') });
    }

    @SubscribeMessage('quote')
    @Idempotent(options)
    quote(@MessageBody() message: Message) {
      const run = effects.hit('quote');
      return { run, at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, run)), nested: { list: [1, 'two', null], amount: message.input } };
    }

    @SubscribeMessage('receipt')
    @Idempotent(options)
    receipt() {
      const run = effects.hit('receipt');
      return { run, pdf: Buffer.from([0x25, 0x50, 0x44, 0x46, run]), pages: [Buffer.from([run])] };
    }

    @SubscribeMessage('place')
    @Idempotent(options)
    place(@ConnectedSocket() client: object) {
      return { event: 'order.placed', data: answer('place', client) };
    }
  }

  /** Two gateways named RefundsGateway, one per feature module, on namespaces (paths) of their own, with the same message. */
  function featureModule(area: string): Type<unknown> {
    @WebSocketGateway(where(`/${area}`))
    class RefundsGateway extends Authenticating {
      @SubscribeMessage('refund')
      @Idempotent(options)
      refund(@MessageBody() _message: Message, @ConnectedSocket() client: object) {
        return answer(`${area}.refund`, client);
      }
    }
    @Module({ providers: [RefundsGateway] })
    class FeatureModule {}
    return FeatureModule;
  }

  /** Each operation's namespace (path) and message. */
  const ROUTES: Record<string, readonly [string, string]> = {
    refund: ['/conf', 'refund'],
    credit: ['/conf', 'credit'],
    held: ['/conf', 'held'],
    steps: ['/conf', 'steps'],
    decline: ['/conf', 'decline'],
    quote: ['/conf', 'quote'],
    receipt: ['/conf', 'receipt'],
    place: ['/conf', 'place'],
    'billing.refund': ['/billing', 'refund'],
    'shipping.refund': ['/shipping', 'refund'],
  };

  let app: INestApplication;
  let base: string;
  const open = new Set<{ close(): void }>();

  /** One message on a socket of its own, as `principal`; what the client saw first. */
  async function send(operation: string, principal: string | undefined, data: Message): Promise<WsSeen> {
    const [path, event] = ROUTES[operation];
    if (platform === 'socket.io') {
      const socket: IoClient = io(`${base}${path}`, {
        transports: ['websocket'],
        reconnection: false,
        ...(principal ? { auth: { token: principal } } : {}),
      });
      const closer = { close: () => socket.close() };
      open.add(closer);
      try {
        return await new Promise<WsSeen>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no answer to ${operation} within 10 s`)), 10_000);
          const done = (seen: WsSeen) => {
            clearTimeout(timer);
            resolve(seen);
          };
          socket.on('connect_error', (error) => reject(error));
          socket.onAny((name: string, payload: unknown) =>
            done(name === 'exception' ? { kind: 'exception', data: payload } : { kind: 'event', event: name, data: payload }),
          );
          socket.emit(event, data, (value: unknown) => done({ kind: 'ack', value }));
        });
      } finally {
        socket.close();
        open.delete(closer);
      }
    }
    const socket = new WebSocket(`${base.replace('http', 'ws')}${path}`, {
      headers: principal ? { authorization: `Bearer ${principal}` } : {},
    });
    const closer = { close: () => socket.terminate() };
    open.add(closer);
    try {
      return await new Promise<WsSeen>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer to ${operation} within 10 s`)), 10_000);
        socket.on('error', reject);
        socket.on('open', () => socket.send(JSON.stringify({ event, data })));
        socket.on('message', (raw) => {
          clearTimeout(timer);
          const parsed = JSON.parse(String(raw)) as { event?: unknown; data?: unknown };
          if (parsed && typeof parsed === 'object' && typeof parsed.event === 'string') {
            resolve(
              parsed.event === 'exception'
                ? { kind: 'exception', data: parsed.data }
                : { kind: 'event', event: parsed.event, data: parsed.data },
            );
          } else resolve({ kind: 'ack', value: parsed });
        });
      });
    } finally {
      socket.terminate();
      open.delete(closer);
    }
  }

  return {
    entry: entryId(driverOptions.interceptor ? `${platform}-interceptor` : platform),
    async boot(store) {
      @Module({
        imports: [IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), featureModule('billing'), featureModule('shipping')],
        providers: [
          ConformanceGateway,
          ...(driverOptions.interceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : []),
        ],
      })
      class AppModule {}
      app = await NestFactory.create(AppModule, { logger: false });
      app.useWebSocketAdapter(platform === 'socket.io' ? new IoAdapter(app) : new WsAdapter(app));
      const port = await freePort();
      await app.listen(port, '127.0.0.1');
      base = `http://127.0.0.1:${port}`;
    },
    async close() {
      for (const socket of open) socket.close();
      await app?.close();
    },
    call: ({ operation, key, principal, input }) => send(operation, principal, { ref: key, input }),
    answerOf(seen) {
      if (seen.kind === 'ack') return seen.value as Answer;
      if (seen.kind === 'event' && seen.event === 'order.placed') return seen.data as Answer;
      throw new Error(`expected an answer, the client got ${describeSeen(seen)}`);
    },
    refusalOf(seen) {
      if (seen.kind !== 'exception') return undefined;
      if (isIdempotencyRpcError(seen.data)) return seen.data.code;
      throw new Error(`expected the library's refusal, the client got ${describeSeen(seen)}`);
    },
    expectRefusalShape(seen, code) {
      // A WsException carrying the problem body plus message, as Nest's filter emits it: the `exception` event.
      expect(seen.kind).toBe('exception');
      expect((seen as { data: unknown }).data).toEqual({
        type: `urn:nestjs-idempotency:error:${code}`,
        title: expect.any(String),
        status: STATUS_OF[code],
        detail: expect.any(String),
        code,
        hint: expect.any(String),
        message: expect.any(String),
        ...(code === IN_FLIGHT ? { retryAfterMs: expect.any(Number) } : {}),
      });
    },
    runs: (operation) => effects.count(operation),
    input: { amount: 10 },
    principals: {
      operation: 'credit',
      via: [platform === 'socket.io' ? 'client.data.user (socket.io middleware)' : 'client.user (handleConnection)'],
      failsClosed: true,
    },
    operations: [
      { name: 'two messages of one gateway', a: 'refund', b: 'credit' },
      {
        name: `two ${platform === 'socket.io' ? 'namespaces' : 'paths'} whose gateways share a class name (RefundsGateway in two modules)`,
        a: 'billing.refund',
        b: 'shipping.refund',
      },
    ],
    inputs: { operation: 'credit', pairs: [{ name: 'another payload', a: { amount: 1 }, b: { amount: 2 } }] },
    replays: [
      {
        name: 'a cached WsException (cacheErrors): the client receives the same exception event',
        operation: 'decline',
        input: {},
        cachedError: true,
        expectSame(first, replay) {
          expect(first).toEqual({ kind: 'exception', data: { status: 'error', code: 'REFUND_DECLINED', run: expect.any(Number) } });
          expect(replay).toEqual(first);
        },
      },
      {
        name: 'a reply with a Date and nested values: the client receives the same reply',
        operation: 'quote',
        input: { amount: 7 },
        expectSame(first, replay) {
          expect(first.kind).toBe('ack');
          expect(replay).toEqual(first);
          expect(JSON.stringify(replay)).toBe(JSON.stringify(first));
        },
      },
      {
        name: 'a reply holding Buffers: the client receives the same bytes, binary on socket.io',
        operation: 'receipt',
        input: {},
        expectSame(first, replay) {
          expect(first.kind).toBe('ack');
          expect(replay).toEqual(first);
          const pdf = (replay as { value: { pdf: unknown } }).value.pdf;
          if (platform === 'socket.io') expect(Buffer.isBuffer(pdf)).toBe(true);
          else expect(pdf).toEqual({ type: 'Buffer', data: [0x25, 0x50, 0x44, 0x46, expect.any(Number)] });
        },
      },
      {
        name: 'a { event, data } reply: the client receives the same event with the same data',
        operation: 'place',
        input: {},
        expectSame(first, replay) {
          expect(first).toMatchObject({ kind: 'event', event: 'order.placed' });
          expect(replay).toEqual(first);
        },
      },
    ],
    refusals: { operation: 'credit', missingKey: true },
    inFlight: { operation: 'held', hold: hold.hold },
    steps: { operation: 'steps', probe: stepProbe },
  };
}
