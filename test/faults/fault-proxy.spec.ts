import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { seededRandom } from '../reliability/harness/load.js';

// The proxy itself, on a plain TCP echo server (every request chunk comes back as its
// reply) and on the shared Redis.
describe('fault proxy', () => {
  let echo: Server;
  let echoPort: number;
  let proxy: FaultProxy;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    echo = createServer((socket) => socket.on('data', (chunk) => socket.write(chunk)).on('error', () => undefined));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    echoPort = (echo.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => echo.close(resolve));
  });
  beforeEach(async () => {
    proxy = await startFaultProxy({ host: '127.0.0.1', port: echoPort }, { random: seededRandom(7) });
  });
  afterEach(async () => {
    for (const socket of sockets.splice(0)) socket.destroy();
    await proxy.stop();
  });

  /** A client through the proxy that collects what it receives and how it ended. */
  async function connect() {
    const socket = createConnection(proxy.address);
    sockets.push(socket);
    const state = { received: '', ended: undefined as string | undefined };
    socket.on('data', (chunk) => (state.received += chunk.toString()));
    socket.on('error', (error: NodeJS.ErrnoException) => (state.ended = error.code));
    socket.on('close', () => (state.ended ??= 'closed'));
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    return { socket, state };
  }

  async function until(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  it('passes bytes both ways untouched', async () => {
    const { socket, state } = await connect();
    socket.write('hello');
    await until(() => state.received === 'hello', 'the echo');
    expect(proxy.stats).toMatchObject({ accepted: 1, open: 1, bytes: { request: 5, reply: 5 } });
  });

  it('freezes both directions with the sockets open, and delivers what was held, in order, on heal', async () => {
    const { socket, state } = await connect();
    proxy.freeze();
    const held = proxy.waitFor('held');
    socket.write('a');
    await held;
    socket.write('b');
    await until(() => proxy.stats.heldBytes === 2, 'both chunks held');
    // A new connection is accepted but frozen too.
    const late = await connect();
    late.socket.write('c');
    await until(() => proxy.stats.heldBytes === 3, 'the new connection held');
    expect(state).toEqual({ received: '', ended: undefined });
    expect(proxy.stats.bytes).toEqual({ request: 0, reply: 0 });
    await proxy.heal();
    await until(() => state.received === 'ab' && late.state.received === 'c', 'the held bytes');
    expect(state.ended).toBeUndefined();
  });

  it('holds the close of a client that gave up on a frozen connection, with what it sent, until the heal', async () => {
    const seen: string[] = [];
    const store = createServer((socket) => {
      socket.on('data', (chunk) => seen.push(chunk.toString())).on('error', () => undefined);
      socket.on('close', () => seen.push('<closed>'));
    });
    await new Promise<void>((resolve) => store.listen(0, '127.0.0.1', resolve));
    const path = await startFaultProxy({ host: '127.0.0.1', port: (store.address() as { port: number }).port });
    try {
      const socket = createConnection(path.address);
      await new Promise((resolve) => socket.once('connect', resolve));
      await until(() => path.stats.open === 1, 'the connection');
      path.freeze();
      socket.end('late statement');
      await path.waitFor<{ bytes: number }>('held', ({ bytes }) => bytes === 0);
      expect(seen).toEqual([]);
      expect(path.stats.open).toBe(1);
      await path.heal();
      await until(() => seen.includes('<closed>'), 'the close to reach the store');
      expect(seen).toEqual(['late statement', '<closed>']);
    } finally {
      await path.stop();
      await new Promise((resolve) => store.close(resolve));
    }
  });

  it('adds a fixed latency per chunk, and a jittered one that keeps the order', async () => {
    const { socket, state } = await connect();
    proxy.latency({ ms: 100, direction: 'reply' });
    let started = Date.now();
    socket.write('x');
    await until(() => state.received === 'x', 'the slowed echo');
    expect(Date.now() - started).toBeGreaterThanOrEqual(95);

    proxy.latency({ ms: 60, jitterMs: 40 });
    state.received = '';
    started = Date.now();
    const sent = 'abcdefghij';
    for (const letter of sent) {
      socket.write(letter);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await until(() => state.received.length === sent.length, 'every jittered chunk');
    expect(state.received).toBe(sent);
    // Both directions slowed: at least 2 × (60 − 40) ms for a round trip.
    expect(Date.now() - started).toBeGreaterThanOrEqual(38);
  });

  it('cuts a reply after N bytes and resets the connection', async () => {
    const { socket, state } = await connect();
    socket.write('first');
    await until(() => state.received === 'first', 'a whole reply');
    proxy.resetMidReply({ afterBytes: 3 });
    const reset = proxy.waitFor('reset');
    socket.write('second');
    await reset;
    await until(() => state.ended !== undefined, 'the client to see the reset');
    expect(state.received).toBe('firstsec');
    // RST right behind the partial reply: Linux reports it as ECONNRESET or, when the data was still unread, as the end.
    expect(['ECONNRESET', 'closed']).toContain(state.ended);
    expect(proxy.stats).toMatchObject({ reset: 1, open: 0 });
    // count: 1 — the next connection's replies are whole again.
    const next = await connect();
    next.socket.write('third');
    await until(() => next.state.received === 'third', 'the next reply');
  });

  it('refuses new connections while open ones keep working, and accepts again on heal', async () => {
    const { socket, state } = await connect();
    await proxy.refuse();
    await expect(connect()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    socket.write('still');
    await until(() => state.received === 'still', 'the open connection');
    await proxy.heal();
    const again = await connect();
    again.socket.write('back');
    await until(() => again.state.received === 'back', 'a new connection');
  });

  it('blackholes the open connections and those made during the fault for good; new ones after the heal work', async () => {
    const seen: string[] = [];
    const store = createServer((socket) => {
      socket.on('data', (chunk) => {
        seen.push(chunk.toString());
        socket.write(chunk);
      });
      socket.on('error', () => undefined).on('close', () => seen.push('<closed>'));
    });
    await new Promise<void>((resolve) => store.listen(0, '127.0.0.1', resolve));
    const path = await startFaultProxy({ host: '127.0.0.1', port: (store.address() as { port: number }).port });
    const opened: Socket[] = [];
    const open = async () => {
      const socket = createConnection(path.address);
      opened.push(socket);
      const state = { received: '', ended: false };
      socket.on('data', (chunk) => (state.received += chunk.toString()));
      socket.on('error', () => undefined).on('close', () => (state.ended = true));
      await new Promise((resolve) => socket.once('connect', resolve));
      return { socket, state };
    };
    try {
      const before = await open();
      before.socket.write('a');
      await until(() => before.state.received === 'a', 'the echo before the fault');
      path.blackhole();
      before.socket.write('b');
      await path.waitFor('dropped', () => path.stats.droppedBytes.request === 1);
      // A connection made during the fault is dead too.
      const during = await open();
      during.socket.write('c');
      await path.waitFor('dropped', () => path.stats.droppedBytes.request === 2);
      await path.heal();
      before.socket.write('d');
      during.socket.write('e');
      await path.waitFor('dropped', () => path.stats.droppedBytes.request === 4);
      // A client's close is dropped as well: the store never hears of it.
      before.socket.destroy();
      await path.waitFor<{ bytes: number }>('dropped', ({ bytes }) => bytes === 0);
      const after = await open();
      after.socket.write('f');
      await until(() => after.state.received === 'f', 'the echo on a connection made after the heal');
      expect(seen).toEqual(['a', 'f']);
      expect({ during: during.state, blackholed: path.stats.blackholed, open: path.stats.open }).toEqual({
        during: { received: '', ended: false },
        blackholed: 2,
        open: 3,
      });
    } finally {
      for (const socket of opened) socket.destroy();
      await path.stop();
      await new Promise((resolve) => store.close(resolve));
    }
  });

  it('on a real Redis: a frozen path fails ioredis commands by its commandTimeout, and heal lets the held ones through', async () => {
    await proxy.stop();
    proxy = await startFaultProxy({ host: '127.0.0.1', port: 6379 });
    const redis = new Redis({ ...proxy.address, lazyConnect: true, commandTimeout: 300, maxRetriesPerRequest: 0 });
    await redis.connect();
    const key = `fault-proxy:${process.pid}:${Date.now()}`;
    try {
      proxy.freeze();
      await expect(redis.incr(key)).rejects.toThrow(/timed out/i);
      await proxy.heal();
      // The INCR sent during the freeze reached Redis after all: a late command, the case orphaned claims exist for.
      await until(() => proxy.stats.bytes.reply > 0, 'the held reply');
      expect(await redis.incr(key)).toBe(2);
    } finally {
      await redis.del(key).catch(() => undefined);
      redis.disconnect();
    }
  });
});
