import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Redis from 'ioredis';
import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';
import { gql, until } from './graphql-app.js';

/**
 * Two processes of one GraphQL app share a Redis of this test's own; one is killed
 * (SIGKILL) in the middle of a mutation. The retry is refused while the dead run's lease
 * lasts, runs once after it, and is replayed from then on.
 */
const APP = join(__dirname, 'fixtures', 'graphql-redis-app.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');
const LEASE_TTL = 2_000;
const REFUND = 'mutation R($orderId: String!) { refund(orderId: $orderId) { orderId run pid } }';
const HANG = { 'x-hang': '1' };

interface AppProcess {
  child: ChildProcess;
  url: string;
}

let server: RedisServerHandle;
let redis: Redis;
const prefix = `gql:${randomUUID()}:`;
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

/** Redis keys of the records still in progress. */
async function leasesInProgress(): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}idem:*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) if ((await redis.hget(key, 's')) === 'p') found.push(key);
  } while (cursor !== '0');
  return found;
}

beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis({ host: '127.0.0.1', port: server.port, maxRetriesPerRequest: 1 });
  redis.on('error', () => undefined);
  await Promise.all([startApp(), startApp()]);
}, 60_000);

afterAll(async () => {
  await Promise.all(apps.map(kill));
  redis?.disconnect();
  await server?.stop();
});

describe('GraphQL mutations, two app processes, one Redis', () => {
  it('runs a mutation once for 60 duplicates sent to both processes at once', async () => {
    const [a, b] = apps;
    const key = randomUUID();
    const orderId = randomUUID();
    const responses = await Promise.all(
      Array.from({ length: 60 }, (_, i) => gql((i % 2 ? a : b).url, REFUND, { key, variables: { orderId } })),
    );
    expect(await runsOf(orderId)).toBe(1);
    const served = responses.filter((r) => r.data);
    expect(served.length).toBeGreaterThanOrEqual(1);
    for (const r of served) expect(r.data).toEqual(served[0].data);
    for (const r of responses.filter((r) => !r.data)) expect(r.errors![0].extensions!.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');
    for (const app of [a, b]) expect((await gql(app.url, REFUND, { key, variables: { orderId } })).data).toEqual(served[0].data);
  });

  it('after a SIGKILL mid-mutation: refused while the lease lasts, one run after it, then replays', async () => {
    const victim = await startApp();
    const survivor = apps[1];
    const key = randomUUID();
    const orderId = randomUUID();

    const doomed = gql(victim.url, REFUND, { key, headers: HANG, variables: { orderId } }).catch(() => undefined);
    await until(async () => (await runsOf(orderId)) >= 1, 'the mutation to start');
    await kill(victim);
    await doomed;

    // The dead run's lease still holds: the retry is refused, not run (the lease is
    // still in Redis after the answer, so the answer came while it held).
    const early = await gql(survivor.url, REFUND, { key, variables: { orderId } });
    expect(early.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT', status: 409 });
    expect(early.errors![0].extensions!.retryAfter).toBeGreaterThanOrEqual(1);
    const held = await leasesInProgress();
    expect(held).toHaveLength(1);
    expect(await runsOf(orderId)).toBe(1);

    // Once Redis has expired the lease, the retry runs exactly once, and is replayed after.
    await until(async () => (await redis.exists(held[0])) === 0, 'the lease to expire', LEASE_TTL + 10_000);
    const retried = await gql(survivor.url, REFUND, { key, variables: { orderId } });
    expect(retried.errors).toBeUndefined();
    expect(retried.data!.refund).toMatchObject({ orderId, run: 2, pid: survivor.child.pid });
    for (const app of apps.filter((a) => a !== victim)) {
      expect(await gql(app.url, REFUND, { key, variables: { orderId } })).toEqual(retried);
    }
    expect(await runsOf(orderId)).toBe(2);
  }, 40_000);
});
