import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { IdempotencyEngine, type ExecutionPolicy } from '../../lib/core/engine.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions } from '../../lib/redis/index.js';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * Counts the commands Redis receives from the store on a node-redis client, with MONITOR
 * on a redis-server of this test's own (nothing else talks to it; the observer is an
 * ioredis connection, which parses MONITOR's lines). Commands run by a script are logged
 * with the source "lua" and are not round trips, so they are left out.
 */
describe.each([3, 2] as const)('RedisIdempotencyStore round trips on node-redis 6 (RESP%s, MONITOR)', (resp) => {
  let server: RedisServerHandle;
  let client: ReturnType<typeof createClient>;
  let admin: Redis;
  let monitor: Redis;
  const seen: { args: string[]; source: string }[] = [];
  const engine = new IdempotencyEngine();
  let policy: ExecutionPolicy;

  beforeAll(async () => {
    server = await startRedisServer();
    client = createClient({ url: `redis://127.0.0.1:${server.port}`, RESP: resp, ...recommendedNodeRedisOptions() });
    await client.connect();
    admin = new Redis({ host: '127.0.0.1', port: server.port });
    const store = new RedisIdempotencyStore(client, { prefix: 'rt:' });
    policy = {
      store,
      ttl: 60_000,
      leaseTtl: 30_000,
      inFlight: 'reject',
      waitTimeout: 0,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1 << 20,
    };
    // Warm-up: the first use of each script sends EVAL once to cache it on the server.
    await engine.execute({ key: 'warmup', fingerprint: 'fp' }, policy, async () => 'x');
    await engine.execute({ key: 'warmup', fingerprint: 'fp' }, policy, async () => 'x');
    monitor = await admin.monitor();
    monitor.on('monitor', (_time: string, args: string[], source: string) => seen.push({ args, source }));
  }, 30_000);

  afterAll(async () => {
    monitor?.disconnect();
    admin?.disconnect();
    client?.destroy();
    await server?.stop();
  });

  /** The commands the store sent while `work` ran, bracketed by two ECHO markers. */
  async function commandsDuring(work: () => Promise<unknown>): Promise<string[]> {
    const marker = randomUUID();
    const probe = new Redis({ host: '127.0.0.1', port: server.port });
    try {
      await probe.echo(`begin:${marker}`);
      await work();
      await probe.echo(`end:${marker}`);
      const deadline = Date.now() + 5_000;
      while (!seen.some((entry) => entry.args[1] === `end:${marker}`)) {
        if (Date.now() > deadline) throw new Error('MONITOR never reported the end marker');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    } finally {
      probe.disconnect();
    }
    const begin = seen.findIndex((entry) => entry.args[1] === `begin:${marker}`);
    const end = seen.findIndex((entry) => entry.args[1] === `end:${marker}`);
    return seen
      .slice(begin + 1, end)
      .filter((entry) => entry.source !== 'lua')
      .map((entry) => entry.args[0].toLowerCase());
  }

  it('costs 2 commands for a first execution and exactly 1 for a replay', async () => {
    const key = 'k' + randomUUID().replace(/-/g, '');
    let runs = 0;
    const handler = async () => ({ orderId: 42, runs: ++runs });
    const first = await commandsDuring(() => engine.execute({ key, fingerprint: 'fp' }, policy, handler));
    const replay = await commandsDuring(async () => {
      const result = await engine.execute({ key, fingerprint: 'fp' }, policy, handler);
      expect(result).toEqual({ value: { orderId: 42, runs: 1 }, replayed: true });
    });
    expect(runs).toBe(1);
    expect(first).toEqual(['evalsha', 'evalsha']);
    expect(replay).toEqual(['evalsha']);
  });

  it('answers a lost script cache with one EVAL per script, then returns to one EVALSHA per call', async () => {
    await admin.script('FLUSH');
    const key = 'k' + randomUUID().replace(/-/g, '');
    const refill = await commandsDuring(() => engine.execute({ key }, policy, async () => 1));
    expect(refill).toEqual(['evalsha', 'eval', 'evalsha', 'eval']);
    const replay = await commandsDuring(() => engine.execute({ key }, policy, async () => 1));
    expect(replay).toEqual(['evalsha']);
  });
});
