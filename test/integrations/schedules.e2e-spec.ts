import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { INestApplicationContext } from '@nestjs/common';
import type Redis from 'ioredis';
import { IdempotencyService, type IdempotencyEvent } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { cronRunsKey, intervalRunsKey, startScheduleApp } from './schedule-app.js';
import { deleteKeys, redisClient, runPrefix, until } from './support.js';

/**
 * `@Idempotent()` on @nestjs/schedule jobs that several instances of one application run:
 * the key is the tick (a cron job's scheduled fire time, an interval's epoch-aligned
 * period), so one instance runs each tick. The instances share a Redis store; one of the
 * cron instances is a process of its own.
 */
const INSTANCE = join(__dirname, 'fixtures', 'schedule-instance.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');

const prefix = runPrefix('schedule');
let redis: Redis;
const clients: Redis[] = [];
const apps: INestApplicationContext[] = [];
let child: ChildProcess | undefined;

function store(): RedisIdempotencyStore {
  const client = redisClient();
  clients.push(client);
  return new RedisIdempotencyStore(client, { prefix: `${prefix}:idem:` });
}

beforeAll(() => {
  redis = redisClient();
});
afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const app of apps) await app.close();
  for (const client of clients) client.disconnect();
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

describe('@Idempotent() on schedules run by several instances', () => {
  it('runs each tick of a @Cron() job (every 2 s) once across three instances (two here, one in another process)', async () => {
    const cron = { name: `settle-${prefix}`, expression: '*/2 * * * * *' };
    child = fork(INSTANCE, [], {
      execArgv: ['--require', TS_REQUIRE],
      env: { ...process.env, PREFIX: prefix, CRON_NAME: cron.name, CRON_EXPRESSION: cron.expression },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let ready = false;
    child.on('message', (message) => (ready ||= (message as { ready?: boolean }).ready === true));
    await until('the instance process to start', () => ready || child!.exitCode !== null, 30_000);
    expect(child.exitCode).toBeNull();
    const events: IdempotencyEvent[] = [];
    for (const instance of ['a', 'b']) {
      apps.push(await startScheduleApp({ prefix, redis, instance, cron, idempotency: { store: store(), onEvent: (e) => events.push(e) } }));
    }
    // Ticks while all three instances run.
    const from = Math.floor(Date.now() / 2000) * 2 + 2;
    await until(
      'four ticks with every instance running',
      async () => Object.keys(await redis.hgetall(cronRunsKey(prefix))).some((s) => Number(s) >= from + 6),
      20_000,
    );
    const runs = await redis.hgetall(cronRunsKey(prefix));
    const seconds = Object.keys(runs).filter((second) => Number(second) >= from);
    expect(seconds.length).toBeGreaterThanOrEqual(3);
    for (const second of seconds) expect({ second, runs: Number(runs[second]) }).toEqual({ second, runs: 1 });
    // The instances here met ticks another instance had claimed: skipped, never run.
    expect(events.some((e) => e.type === 'in_flight_conflict' || e.type === 'replayed')).toBe(true);
    // The record of a tick is found by its scheduled time.
    const idempotency = apps[0].get(IdempotencyService);
    const tick = new Date(Number(seconds[0]) * 1000).toISOString();
    expect((await idempotency.inspect(tick, { operation: `cron ${cron.name}` }))?.status).toBe('completed');
  }, 40_000);

  it('runs each epoch-aligned period of an @Interval() job at most once across three instances', async () => {
    const every = 250;
    const interval = { name: `sweep-${prefix}`, every };
    const started = Date.now();
    const local: INestApplicationContext[] = [];
    for (const instance of ['a', 'b', 'c']) {
      local.push(await startScheduleApp({ prefix, redis, instance, interval, idempotency: { store: store() } }));
    }
    apps.push(...local);
    await until('six periods to run', async () => (await redis.llen(intervalRunsKey(prefix))) >= 6, 20_000);
    for (const app of local) await app.close();
    apps.splice(apps.length - local.length, local.length);
    const ended = Date.now();
    const runs = (await redis.lrange(intervalRunsKey(prefix), 0, -1)).map((entry) => Number(entry.split('@')[1]));
    // Each instance ticks every period; without the key each period would run up to three times.
    const periods = Math.floor(ended / every) - Math.floor(started / every) + 1;
    expect(runs.length).toBeLessThanOrEqual(periods);
    const runsPerPeriod = new Map<number, number>();
    for (const at of runs) runsPerPeriod.set(Math.floor(at / every), (runsPerPeriod.get(Math.floor(at / every)) ?? 0) + 1);
    // A run is logged a moment after its key was computed, so it may land one period later; never two in one otherwise.
    expect([...runsPerPeriod.values()].filter((n) => n > 1).length).toBeLessThanOrEqual(1);
  }, 40_000);
});
