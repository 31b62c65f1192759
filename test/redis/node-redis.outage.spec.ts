import { randomUUID } from 'node:crypto';
import { createClient, type RedisClientOptions } from 'redis';
import { IdempotencyStoreUnavailableError } from '../../lib/core/errors.js';
import { IdempotencyEngine, type ExecutionPolicy } from '../../lib/core/engine.js';
import { RedisIdempotencyStore, RedisOperationTimeoutError, recommendedNodeRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

// "No hang" is a correctness claim: the bound below is generous on purpose (the store's
// own timeout is 2 s by default; docs/redis.md, "What an outage looks like").
const NO_HANG_BOUND_MS = 5_000;
const key = () => 'k' + randomUUID().replace(/-/g, '');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function settleWithin<T>(promise: Promise<T>): Promise<{ error?: unknown; value?: T; elapsed: number }> {
  const startedAt = performance.now();
  try {
    const value = await promise;
    return { value, elapsed: performance.now() - startedAt };
  } catch (error) {
    return { error, elapsed: performance.now() - startedAt };
  }
}

/** Retries `probe` until it succeeds; the client must heal by itself. */
async function eventually(probe: () => Promise<unknown>, timeout = 15_000): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      await probe();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(100);
    }
  }
}

describe('RedisIdempotencyStore on node-redis 6 when Redis goes away', () => {
  let server: RedisServerHandle;
  const clients: { destroy(): void }[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    for (const client of clients) client.destroy();
    await server?.stop();
  });

  async function connect(options: RedisClientOptions) {
    const client = createClient({ url: `redis://127.0.0.1:${server.port}`, ...options });
    client.on('error', () => undefined); // connection errors are expected here; commands report them
    clients.push(client);
    await client.connect();
    return client;
  }

  it('rejects at once while Redis is down (recommended settings), then recovers on the same client', async () => {
    const client = await connect(recommendedNodeRedisOptions({ maxReconnectDelay: 200 }));
    const store = new RedisIdempotencyStore(client, { prefix: `outage:${randomUUID()}:`, timeout: 2_000 });
    const before = key();
    expect((await store.claim(before, { token: 't', leaseTtl: 30_000 })).claimed).toBe(true);

    await server.kill('SIGKILL');
    // The socket's close reaches the client on its own: until then a command could still be written.
    await eventually(async () => expect(client.isReady).toBe(false), 5_000);
    const calls: (() => Promise<unknown>)[] = [
      () => store.claim(key(), { token: 't', leaseTtl: 30_000 }),
      () => store.complete(before, 't', { result: 'r', ttl: 60_000 }),
      () => store.get(before),
      () => store.ping(),
    ];
    for (const call of calls) {
      const outcome = await settleWithin(call());
      expect(outcome.error).toBeInstanceOf(Error);
      expect((outcome.error as Error).message).toBe('The client is offline');
      // No wait at all: refused before anything is written (0 ms on an idle machine).
      expect(outcome.elapsed).toBeLessThan(500);
    }

    await server.restart(); // same port, empty data
    await eventually(() => store.ping());
    const after = key();
    expect((await store.claim(after, { token: 't2', leaseTtl: 30_000 })).claimed).toBe(true);
    expect(await store.complete(after, 't2', { result: 'ok', ttl: 60_000 })).toBe(true);
    expect(await store.get(after)).toMatchObject({ status: 'completed', result: 'ok' });
  });

  it('bounds every call with its own timeout even with the default node-redis settings (offline queue on)', async () => {
    const client = await connect({ socket: { reconnectStrategy: () => 200 } });
    const store = new RedisIdempotencyStore(client, { prefix: `outage:${randomUUID()}:`, timeout: 500 });
    await store.ping();

    await server.kill('SIGKILL');
    const outcome = await settleWithin(store.claim(key(), { token: 't', leaseTtl: 30_000 }));
    expect(outcome.error).toBeInstanceOf(RedisOperationTimeoutError);
    expect((outcome.error as Error).message).toMatch(/did not answer RedisIdempotencyStore\.claim within 500 ms/);
    expect(outcome.elapsed).toBeLessThan(NO_HANG_BOUND_MS);

    await server.restart();
    await eventually(() => store.ping());
    expect((await store.claim(key(), { token: 't', leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it("fails a call to a frozen Redis (SIGSTOP: connected, never answering) at the store's timeout", async () => {
    // commandOptions.timeout counts only until a command is written: it never ends the wait for a reply.
    const client = await connect({ ...recommendedNodeRedisOptions({ maxReconnectDelay: 200 }), commandOptions: { timeout: 300 } });
    const store = new RedisIdempotencyStore(client, { prefix: `outage:${randomUUID()}:` });
    await store.ping();
    server.signal('SIGSTOP');
    try {
      const outcome = await settleWithin(store.claim(key(), { token: 't', leaseTtl: 30_000 }));
      expect(outcome.error).toBeInstanceOf(RedisOperationTimeoutError);
      expect((outcome.error as Error).message).toBe('Redis did not answer RedisIdempotencyStore.claim within 2000 ms');
      expect(outcome.elapsed).toBeGreaterThanOrEqual(1_900);
      expect(outcome.elapsed).toBeLessThan(NO_HANG_BOUND_MS);
    } finally {
      server.signal('SIGCONT');
    }
    await eventually(() => store.ping());
    expect((await store.claim(key(), { token: 't', leaseTtl: 30_000 })).claimed).toBe(true);
  });

  it('surfaces as IdempotencyStoreUnavailableError (503) through the engine, handler not run, and recovers', async () => {
    const client = await connect(recommendedNodeRedisOptions({ maxReconnectDelay: 200 }));
    const store = new RedisIdempotencyStore(client, { prefix: `outage:${randomUUID()}:` });
    const policy: ExecutionPolicy = {
      store,
      ttl: 60_000,
      leaseTtl: 30_000,
      inFlight: 'reject',
      waitTimeout: 0,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1 << 20,
    };
    const engine = new IdempotencyEngine();
    let runs = 0;
    const handler = async () => ++runs;

    await server.kill('SIGKILL');
    const outcome = await settleWithin(engine.execute({ key: key() }, policy, handler));
    expect(outcome.error).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect((outcome.error as IdempotencyStoreUnavailableError).status).toBe(503);
    expect(outcome.elapsed).toBeLessThan(NO_HANG_BOUND_MS);
    expect(runs).toBe(0);

    await server.restart();
    await eventually(() => store.ping());
    const k = key();
    expect(await engine.execute({ key: k }, policy, handler)).toEqual({ value: 1, replayed: false });
    expect(await engine.execute({ key: k }, policy, handler)).toEqual({ value: 1, replayed: true });
  });
});
