import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ack, MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { Gate, until } from '../integrations/support.js';
import { captureLogger } from '../support/capture-logger.js';
import { disconnects, effects, gates, gatewayModule } from './orders-gateway.js';
import { closeClients, connect, startGatewayApp, type GatewayApp, type Seen } from './support.js';

/**
 * `@Idempotent()` on `@SubscribeMessage()` handlers, end to end on both Nest adapters,
 * with `IdempotencyInterceptor` registered globally (the application's interceptors run
 * around gateway handlers too): a client that lost its connection while the handler ran
 * re-sends after the reconnect and gets the answer from the record, the handler having run
 * once; `inFlight: 'wait'` answers a duplicate with the first's answer; who is asking is read
 * from the socket (socket.io middleware's `client.data.user`, a Passport guard's
 * `client.handshake.user`), and a handshake with credentials but no user is refused.
 */
let sequence = 0;
const requestId = (what: string) => `${what}-${process.pid}-${++sequence}`;

afterEach(() => closeClients());

describe.each(['socket.io', 'ws'] as const)('gateway handlers on %s', (platform) => {
  let gateway: GatewayApp;

  beforeAll(async () => {
    gateway = await startGatewayApp(platform, gatewayModule(platform));
  });
  afterAll(() => gateway?.close());

  it('a client whose connection dropped while the handler ran re-sends after the reconnect: the answer comes from the record, the handler ran once', async () => {
    const id = requestId('lost-ack');
    const gate = new Gate();
    gates.set(id, gate);
    const first = await connect(platform, gateway.base, '/orders');
    first.fire('place', { requestId: id, sku: 'book' });
    await until('the handler to start', () => effects.count(id) === 1, 5_000);
    const closed = disconnects.count;
    first.close();
    // The gateway has seen the connection go (Nest's adapter unsubscribed the message) while the handler still runs.
    await until('the gateway to see the connection close', () => disconnects.count > closed, 5_000);
    gate.open();
    const again = await connect(platform, gateway.base, '/orders');
    let seen: Seen | undefined;
    // The first run may still be storing its answer: the duplicate is refused as in flight until then.
    await until(
      'the re-sent message to be answered from the record',
      async () => (seen = await again.send('place', { requestId: id, sku: 'book' })).kind === 'ack',
      5_000,
    );
    expect(seen).toEqual({ kind: 'ack', value: { orderId: `o_${id}`, sku: 'book', run: 1, by: null } });
    expect(effects.count(id)).toBe(1);
  });

  it("inFlight: 'wait': a duplicate sent while the first runs waits for it and gets its answer", async () => {
    const id = requestId('wait');
    const gate = new Gate();
    gates.set(id, gate);
    const a = await connect(platform, gateway.base, '/orders');
    const b = await connect(platform, gateway.base, '/orders');
    const first = a.send('place-wait', { requestId: id, sku: 'pen' });
    await until('the handler to start', () => effects.count(id) === 1, 5_000);
    const duplicate = b.send('place-wait', { requestId: id, sku: 'pen' });
    gate.open();
    const [one, two] = await Promise.all([first, duplicate]);
    expect(one).toEqual({ kind: 'ack', value: { orderId: `o_${id}`, sku: 'pen', run: 1, by: null } });
    expect(two).toEqual(one);
    expect(effects.count(id)).toBe(1);
  });
});

describe('who is asking, on socket.io', () => {
  let gateway: GatewayApp;
  /** The module's log: a refusal's details (where the credentials are, which option fixes it) go there, not to the socket. */
  const logged: string[] = [];

  beforeAll(async () => {
    gateway = await startGatewayApp('socket.io', gatewayModule('socket.io', { logger: captureLogger(logged) }));
  });
  afterAll(() => gateway?.close());

  it('two sockets of one user share the key space (a Passport guard on the handshake), another user gets their own record', async () => {
    const id = requestId('users');
    const alice = await connect('socket.io', gateway.base, '/orders', { auth: { passport: 'alice' } });
    const aliceAgain = await connect('socket.io', gateway.base, '/orders', { auth: { passport: 'alice' } });
    const bob = await connect('socket.io', gateway.base, '/orders', { auth: { passport: 'bob' } });
    const first = await alice.send('place', { requestId: id, sku: 'lamp' });
    expect(first).toEqual({ kind: 'ack', value: { orderId: `o_${id}`, sku: 'lamp', run: 1, by: 'alice' } });
    expect(await aliceAgain.send('place', { requestId: id, sku: 'lamp' })).toEqual(first);
    expect(await bob.send('place', { requestId: id, sku: 'lamp' })).toEqual({
      kind: 'ack',
      value: { orderId: `o_${id}`, sku: 'lamp', run: 2, by: 'bob' },
    });
  });

  it.each([
    ['an auth.token', { auth: { token: 'eyJhbGciOi' } }, /handshake\.auth\.token/],
    ['an Authorization header', { headers: { authorization: 'Bearer eyJhbGciOi' } }, /an Authorization header/],
  ])('a handshake with %s but no user is refused, never served as anonymous', async (_label, options, where) => {
    const id = requestId('credentials');
    const client = await connect('socket.io', gateway.base, '/orders', options);
    const seen = await client.send('place', { requestId: id, sku: 'lamp' });
    expect(seen).toMatchObject({ kind: 'exception', data: { code: 'IDEMPOTENCY_CONFIGURATION_ERROR', status: 500 } });
    expect(JSON.stringify(seen)).not.toMatch(where);
    const line = logged.find((entry) => entry.startsWith('error ') && where.test(entry));
    expect(line).toMatch(/client\.data\.user/);
    expect(effects.count(id)).toBe(0);
  });
});

describe('boot refuses what a gateway handler cannot be served with', () => {
  async function boot(options: Record<string, unknown>, ack = false): Promise<unknown> {
    @WebSocketGateway()
    class ChatGateway {
      @SubscribeMessage('send')
      @Idempotent(options)
      send(@MessageBody() message: { id: string }, @Ack() _ack?: (value: unknown) => void) {
        return message.id;
      }
    }
    @WebSocketGateway()
    class PlainGateway {
      @SubscribeMessage('send')
      @Idempotent(options)
      send(@MessageBody() message: { id: string }) {
        return message.id;
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ logger: false })], providers: [ack ? ChatGateway : PlainGateway] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    try {
      await app.init();
      return undefined;
    } catch (error) {
      return error;
    } finally {
      await app.close();
    }
  }

  it('a handler without a key option, naming the fix', async () => {
    const error = (await boot({})) as { code?: string; message: string; hint?: string };
    expect(error.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
    expect(error.message).toMatch(/PlainGateway\.send: a WebSocket gateway handler .* needs a key option/);
    expect(error.hint).toMatch(/@Idempotent\(\{ key: \(data: PlaceOrder, client\) => data\.requestId \}\)/);
  });

  it.each([
    ['a scope', { scope: () => 'tenant' }, /scope does not apply to a WebSocket gateway handler/],
    ['a header', { header: 'X-Key' }, /header does not apply to a WebSocket gateway handler/],
    ['ack', { ack: true }, /ack does not apply to a WebSocket gateway handler/],
    ['a key that is no function', { key: 'id' }, /key must be a function of the message's data and the client/],
  ])('%s', async (_label, options, message) => {
    expect(await boot({ key: (m: { id: string }) => m.id, ...options })).toMatchObject({ message: expect.stringMatching(message) });
  });

  it('a handler that calls @Ack() itself (a duplicate, which does not run it, would never be acknowledged)', async () => {
    expect(await boot({ key: (m: { id: string }) => m.id }, true)).toMatchObject({
      message: expect.stringMatching(/ChatGateway\.send: it takes @Ack\(\)/),
    });
  });

  it('a handler with a key boots', async () => {
    expect(await boot({ key: (m: { id: string }) => m.id })).toBeUndefined();
  });
});
