import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort as freeRedisPort, startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';
import { buildPageApps, cleanUpDocApps, freePort, requestJson, run, startApp, startHttpApp, stopApp, waitFor } from './support/doc-app.js';

/**
 * docs/redis.md as a user meets it (test/docs/support/doc-app.ts): the page's application
 * (the store that owns its client, `createRedisIdempotencyStore`), its bring-your-own-client
 * variants (ioredis, node-redis) and its near-cache variant, built by `tsc` from the page's
 * own text with getting started's package.json and tsconfig.json, started with
 * `node dist/main.js`, and run on a real Redis: what the page claims about replays, the
 * boot wait, the near cache and shutdown.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
/** The page's REDIS_PREFIX, unique per run: parallel runs never share a record or a near cache's invalidations. */
const prefixOf = (what: string) => `docs-redis-${what}-${process.pid}-${randomUUID().slice(0, 8)}`;

interface NearCacheStats {
  enabled: boolean;
  entries: number;
  hits: number;
  misses: number;
  invalidations: number;
  tracking: string;
}

/**
 * Run in an app's folder (`node --input-type=module`): loads its compiled modules (ES
 * modules, as the page's package.json makes them) without starting it, and prints which
 * Redis clients they loaded (`redis`, `ioredis`): both are CommonJS packages, so what an ES
 * module imports of them lands in require.cache.
 */
const LOADED_CLIENTS = `
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
await import(pathToFileURL(process.cwd() + '/dist/app.module.js').href);
await import('nestjs-idempotency/redis');
const loaded = new Set();
for (const file of Object.keys(createRequire(import.meta.url).cache)) {
  const match = /node_modules\\/(ioredis|redis|@redis\\/[^/]+)\\//.exec(file);
  if (match) loaded.add(match[1].startsWith('@redis/') ? 'redis' : match[1]);
}
console.log([...loaded].sort().join(','));
process.exit(0);
`;

async function placeOrder(base: string, key: string, order: { sku: string; quantity: number }) {
  const { status, replayed, body } = await requestJson(base, 'POST', '/orders', { body: order, key });
  return { status, replayed, body: body as { id: string; sku: string; quantity: number } };
}

async function placed(base: string): Promise<number> {
  return ((await requestJson(base, 'GET', '/orders/placed')).body as { placed: number }).placed;
}

async function stats(base: string): Promise<NearCacheStats> {
  return (await requestJson(base, 'GET', '/near-cache')).body as NearCacheStats;
}

/** The Redis keys of the store's records under `prefix` (not the near cache's own keys, which have no braces). */
async function recordKeys(redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:idempotency:{*`, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys.sort();
}

describe('docs/redis.md, built and run as a user would', () => {
  let dirs: Map<string, string>;
  let redis: Redis;
  const servers: RedisServerHandle[] = [];

  beforeAll(async () => {
    dirs = await buildPageApps('redis', ['default', 'ioredis', 'node-redis', 'near-cache']);
    redis = new Redis(REDIS_URL);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    for (const server of servers) await server.stop();
    redis?.disconnect();
  });

  // The page's application (the store makes and owns its ioredis client), and the same app on a client of
  // its own, ioredis or node-redis: the same claims. `loads` is what importing the compiled modules loads.
  it.each([
    ['the application', 'default', ''],
    ['the ioredis variant', 'ioredis', 'ioredis'],
    ['the node-redis variant', 'node-redis', 'redis'],
  ])(
    '%s waits at boot for a Redis that comes up late, replays a retry, refuses a reused key, and exits on SIGTERM with Redis down',
    async (_what, name, loads) => {
      const dir = dirs.get(name)!;
      const prefix = prefixOf(name);
      // A Redis that is not there yet: the page's client keeps reconnecting (recommendedRedisOptions()).
      const redisPort = await freeRedisPort();
      const port = await freePort();
      const base = `http://127.0.0.1:${port}`;
      const answers = () =>
        fetch(base).then(
          () => true,
          () => false,
        );
      const app = startApp(dir, { PORT: String(port), REDIS_URL: `redis://127.0.0.1:${redisPort}`, REDIS_PREFIX: prefix });
      await waitFor(
        'the app to build its modules',
        () => {
          if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
          return app.output().includes('IdempotencyModule dependencies initialized');
        },
        30_000,
      );
      // "the application listens and reports ready only once Redis answers"
      expect(await answers()).toBe(false);
      expect(app.output()).not.toContain('Nest application successfully started');
      const server = await startRedisServer({ port: redisPort });
      servers.push(server);
      await waitFor(
        'the app to listen once Redis is up',
        async () => {
          if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
          return answers();
        },
        30_000,
      );

      // The first request after boot is protected (before the wait, it was a 503: the client was not ready yet).
      const key = randomUUID();
      const first = await placeOrder(base, key, { sku: 'tea', quantity: 2 });
      expect(first).toMatchObject({ status: 201, replayed: null, body: { sku: 'tea', quantity: 2 } });
      expect(first.body.id).toMatch(/^ord_/);
      expect(await placeOrder(base, key, { sku: 'tea', quantity: 2 })).toEqual({ status: 201, replayed: 'true', body: first.body });
      expect(await placed(base)).toBe(1);

      // The page's curl commands, verbatim, on this app's port: one more order, its replay, the key reused
      // (curl prints the last count right after the 422's body, which ends without a newline).
      const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
      const output = await run('bash', ['-c', script], dir);
      const lines = [...output.matchAll(/HTTP\/[\d.]+ (\d+).*$|idempotent-replayed: (\S+)|(\{"placed":\d+\})/gim)];
      expect(lines.map(([, status, replayed, count]) => status ?? (replayed ? `replayed ${replayed}` : count))).toEqual([
        '201',
        '201',
        'replayed true',
        '422',
        '{"placed":2}',
      ]);

      // Records live under the page's prefix, one per key.
      const client = new Redis(redisPort, '127.0.0.1');
      try {
        expect(await recordKeys(client, prefix)).toHaveLength(2);
      } finally {
        client.disconnect();
      }

      // The node-redis variant loads node-redis and never ioredis, the ioredis one the reverse; the owned store
      // loads ioredis only when createRedisIdempotencyStore() runs (at boot, in the module's factory).
      const loaded = await run('node', ['--input-type=module', '-e', LOADED_CLIENTS], dir);
      expect(loaded.trim()).toBe(loads);

      // Redis down at SIGTERM: the owned store drops its client (not connected), the ioredis module's quit() is
      // refused and it drops the socket, node-redis's close() returns at once. Either way the process exits.
      // (A client nobody closed would keep it alive: stopApp fails past its deadline.)
      await server.kill();
      await stopApp(app);
    },
    60_000,
  );

  it('the application, with no Redis at its URL: the boot stops after readyTimeout, naming what to check, and the process exits', async () => {
    const redisPort = await freeRedisPort();
    const app = startApp(dirs.get('default')!, {
      PORT: String(await freePort()),
      REDIS_URL: `redis://127.0.0.1:${redisPort}`,
      REDIS_PREFIX: prefixOf('absent'),
    });
    const started = Date.now();
    // "stops the boot with an IdempotencyConfigurationError ... A client that createRedisIdempotencyStore() made is
    // ended then, so it does not keep the process alive": bootstrap() rejects, and nothing is left reconnecting.
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'alive'>((resolve) => (timer = setTimeout(() => resolve('alive'), 25_000)));
    const code = await Promise.race([app.exited, deadline]).finally(() => clearTimeout(timer));
    expect(code).not.toBe('alive');
    expect(code).not.toBe(0);
    // readyTimeout: 10 s by default.
    expect(Date.now() - started).toBeGreaterThanOrEqual(9_000);
    expect(app.output()).toContain('IdempotencyConfigurationError');
    expect(app.output()).toContain(`127.0.0.1:${redisPort}`);
    expect(app.output()).not.toContain('Nest application successfully started');
  }, 40_000);

  it('the near-cache variant: another instance replays the order, a replay comes from memory, a deleted or expired record runs again', async () => {
    const dir = dirs.get('near-cache')!;
    const prefix = prefixOf('near');
    const env = { REDIS_URL, REDIS_PREFIX: prefix };
    // Two instances of the service on one Redis and one prefix.
    const [a, b] = await Promise.all([startHttpApp(dir, env), startHttpApp(dir, env)]);
    for (const instance of [a, b]) {
      await waitFor('the near cache to be proven', async () => (await stats(instance.base)).enabled, 20_000);
    }

    const order = { sku: 'tea', quantity: 2 };
    const key = randomUUID();
    const first = await placeOrder(a.base, key, order);
    expect(first).toMatchObject({ status: 201, replayed: null });
    // "a retry that reaches another instance is replayed there too"
    expect(await placeOrder(b.base, key, order)).toEqual({ status: 201, replayed: 'true', body: first.body });
    expect(await placed(b.base)).toBe(0);

    // "An instance caches a record from the second duplicate that reaches it on ... later duplicates are answered from memory"
    const before = await stats(a.base);
    expect(before.tracking).toBe('client');
    expect(await placeOrder(a.base, key, order)).toEqual({ status: 201, replayed: 'true', body: first.body });
    const noted = await stats(a.base);
    expect(noted.misses).toBe(before.misses + 1);
    expect(noted.entries).toBe(before.entries);
    expect(await placeOrder(a.base, key, order)).toEqual({ status: 201, replayed: 'true', body: first.body });
    const cached = await stats(a.base);
    expect(cached.misses).toBe(noted.misses + 1);
    expect(cached.entries).toBe(before.entries + 1);
    expect(await placeOrder(a.base, key, order)).toEqual({ status: 201, replayed: 'true', body: first.body });
    const hit = await stats(a.base);
    expect(hit.hits).toBe(cached.hits + 1);
    expect(hit.misses).toBe(cached.misses);
    expect(await placed(a.base)).toBe(1);

    // A DEL of the record reaches A's cache as an invalidation: the next retry runs the handler again.
    const [recordKey] = await recordKeys(redis, prefix);
    expect(await recordKeys(redis, prefix)).toHaveLength(1);
    expect(await redis.del(recordKey)).toBe(1);
    await waitFor('the invalidation of the deleted record', async () => (await stats(a.base)).invalidations > hit.invalidations, 10_000);
    const again = await placeOrder(a.base, key, order);
    expect(again).toMatchObject({ status: 201, replayed: null });
    expect(again.body.id).not.toBe(first.body.id);
    expect(await placed(a.base)).toBe(2);

    // So does its expiry: a record cached by A, then expired in Redis, is not replayed.
    const otherKey = randomUUID();
    const keysBefore = await recordKeys(redis, prefix);
    const second = await placeOrder(a.base, otherKey, order);
    expect(second.status).toBe(201);
    const [secondKey] = (await recordKeys(redis, prefix)).filter((name) => !keysBefore.includes(name));
    for (let i = 0; i < 3; i++) expect(await placeOrder(a.base, otherKey, order)).toMatchObject({ replayed: 'true' });
    const beforeExpiry = await stats(a.base);
    expect(beforeExpiry.hits).toBe(hit.hits + 1);
    expect(await redis.pexpire(secondKey, 1)).toBe(1);
    await waitFor('Redis to expire the record', async () => (await redis.pttl(secondKey)) === -2, 5_000);
    await waitFor(
      'the invalidation of the expired record',
      async () => (await stats(a.base)).invalidations > beforeExpiry.invalidations,
      10_000,
    );
    const rerun = await placeOrder(a.base, otherKey, order);
    expect(rerun).toMatchObject({ status: 201, replayed: null });
    expect(rerun.body.id).not.toBe(second.body.id);
    expect(await placed(a.base)).toBe(4);

    // SIGTERM closes the near cache's own connection and the client the store made (the module closes the store).
    await Promise.all([stopApp(a.app), stopApp(b.app)]);
    const leftover = await recordKeys(redis, prefix);
    if (leftover.length > 0) await redis.del(...leftover);
    await redis.del(`${prefix}:idempotency:__near-cache-db__`);
  }, 60_000);
});
