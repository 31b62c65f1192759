import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Redis from 'ioredis';
import request from 'supertest';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';

/**
 * Two instances of one Nest app (separate processes) share a Redis of this test's own,
 * through IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(redis) }).
 */
const APP = join(__dirname, 'fixtures', 'idempotent-app.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');
const LEASE_TTL = 3_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` until it returns a value (not undefined), failing after `timeoutMs`. */
async function poll<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs = 15_000, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

interface AppProcess {
  child: ChildProcess;
  url: string;
}

let server: RedisServerHandle;
let redis: Redis;
const prefix = `app:${randomUUID()}:`;
const apps: AppProcess[] = [];

async function startApp(): Promise<AppProcess> {
  const child = fork(APP, [], {
    execArgv: ['--require', TS_REQUIRE],
    env: { ...process.env, REDIS_PORT: String(server.port), PREFIX: prefix, LEASE_TTL: String(LEASE_TTL) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (message) => resolve((message as { url: string }).url));
    child.once('exit', (code) => reject(new Error(`app exited with ${code} before listening`)));
  });
  const app = { child, url };
  apps.push(app);
  return app;
}

async function kill(app: AppProcess): Promise<void> {
  if (app.child.exitCode !== null || app.child.signalCode !== null) return;
  const exited = new Promise((resolve) => app.child.once('exit', resolve));
  app.child.kill('SIGKILL');
  await exited;
}

const runsOf = async (orderId: string) => Number(await redis.get(`${prefix}runs:${orderId}`));

/** Redis keys of the records still in progress, with their remaining lease (PTTL, ms). */
async function leasesInProgress(): Promise<{ key: string; pttl: number }[]> {
  const found: { key: string; pttl: number }[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}idem:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      if ((await redis.hget(key, 's')) === 'p') found.push({ key, pttl: await redis.pttl(key) });
    }
  } while (cursor !== '0');
  return found;
}
const charge = (app: AppProcess, key: string, orderId: string, handlerMs = 0, path = '/charges') =>
  request(app.url).post(path).set('Idempotency-Key', key).set('x-handler-ms', String(handlerMs)).send({ orderId, amount: 10 });

beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis({ host: '127.0.0.1', port: server.port, maxRetriesPerRequest: 1 });
  redis.on('error', () => undefined);
  await Promise.all([startApp(), startApp()]);
}, 30_000);

afterAll(async () => {
  await Promise.all(apps.map(kill));
  redis?.disconnect();
  await server?.stop();
});

describe('idempotent app, two processes, one Redis', () => {
  it('runs the handler once for 100 concurrent requests with one key, 50 to each process (reject mode)', async () => {
    const [a, b] = apps;
    const key = randomUUID();
    const orderId = randomUUID();
    const responses = await Promise.all(Array.from({ length: 100 }, (_, i) => charge(i % 2 ? a : b, key, orderId, 300)));
    expect(await runsOf(orderId)).toBe(1);
    const succeeded = responses.filter((r) => r.status === 201);
    expect(succeeded.length).toBeGreaterThanOrEqual(1);
    for (const r of succeeded) expect(r.body).toEqual(succeeded[0].body);
    for (const r of responses.filter((r) => r.status !== 201)) {
      expect(r.status).toBe(409);
      expect(r.body.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');
    }
    // Once finished, both processes replay the one stored answer.
    for (const app of [a, b]) {
      const replay = await charge(app, key, orderId);
      expect(replay.status).toBe(201);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.body).toEqual(succeeded[0].body);
    }
  });

  it('gives 100 concurrent requests with one key the same answer from one run (wait mode)', async () => {
    const [a, b] = apps;
    const key = randomUUID();
    const orderId = randomUUID();
    const responses = await Promise.all(Array.from({ length: 100 }, (_, i) => charge(i % 2 ? a : b, key, orderId, 300, '/charges-wait')));
    expect(await runsOf(orderId)).toBe(1);
    expect(responses.map((r) => r.status)).toEqual(Array(100).fill(201));
    for (const r of responses) expect(r.body).toEqual(responses[0].body);
    expect(responses.filter((r) => r.headers['idempotent-replayed'] === 'true')).toHaveLength(99);
  });

  it('after a SIGKILL mid-handler: 409 while the lease lasts, one run after it, then replays', async () => {
    const victim = await startApp();
    const survivor = apps[1];
    const key = randomUUID();
    const orderId = randomUUID();

    const doomed = charge(victim, key, orderId, 60_000).catch(() => undefined);
    await poll(async () => ((await runsOf(orderId)) >= 1 ? true : undefined), 'the handler to start');
    await kill(victim);
    await doomed;

    // The dead owner's lease still holds: a retry is refused, not run. The lease is
    // still in Redis after the answer, so the answer came while it held.
    const early = await charge(survivor, key, orderId);
    expect(early.status).toBe(409);
    expect(early.headers['retry-after']).toBeDefined();
    const held = await leasesInProgress();
    expect(held).toHaveLength(1);
    expect(held[0].pttl).toBeGreaterThan(0);
    expect(await runsOf(orderId)).toBe(1);

    // Once Redis has expired the lease, the retry runs the handler, exactly once.
    await poll(async () => ((await redis.exists(held[0].key)) === 0 ? true : undefined), 'the lease to expire', LEASE_TTL + 10_000);
    const retried = await charge(survivor, key, orderId);
    expect(retried.status).toBe(201);
    expect(retried.body).toMatchObject({ orderId, run: 2 });
    expect(await runsOf(orderId)).toBe(2);

    const replay = await charge(survivor, key, orderId);
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(retried.body);
    expect(await runsOf(orderId)).toBe(2);
  }, 30_000);

  it('answers 503 without running the handler while Redis is down, and recovers when it returns', async () => {
    const app = apps[1];
    const localRuns = async () => (await request(app.url).get('/local-runs').expect(200)).body.localRuns as number;
    const before = await localRuns();

    await server.kill('SIGKILL');
    const down = await charge(app, randomUUID(), randomUUID());
    expect(down.status).toBe(503);
    expect(down.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(down.body).toMatchObject({ status: 503, code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
    expect(await localRuns()).toBe(before);

    await server.restart();
    const key = randomUUID();
    const orderId = randomUUID();
    let up;
    const deadline = Date.now() + 15_000;
    do {
      await sleep(100);
      up = await charge(app, key, orderId);
    } while (up.status === 503 && Date.now() < deadline);
    expect(up.status).toBe(201);
    expect(up.body).toMatchObject({ orderId, run: 1 });
  }, 30_000);
});
