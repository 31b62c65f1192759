import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { deleteKeys } from '../integrations/support.js';
import { buildPageApps, cleanUpDocApps, requestJson, runApp, startHttpApp, stopApp, waitFor, type RunningApp } from './support/doc-app.js';

/**
 * docs/events-and-schedules.md's applications as a user meets them
 * (test/docs/support/doc-app.ts): built by `tsc` from the page's own files with
 * getting-started's tsconfig.json, started with `node dist/main.js`, on the real Redis.
 * Two instances share one store: a payment reported twice (to either instance) sends one
 * receipt, another amount under the order is refused and logged, and each tick of the
 * schedule runs on one instance. Right after `app.init()`, with the page's
 * `recommendedRedisOptions()` client (no offline queue), an event and a tick run
 * protected. The page's env vars: `REDIS_PREFIX` (this run's own keys), `SETTLEMENT_CRON`
 * (a 2 s schedule instead of the nightly one), `REDIS_URL`, `PORT`.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const EVERY_2_SECONDS = '*/2 * * * * *';
/** For the enqueueing variant, whose runs are not told apart by time. */
const EVERY_SECOND = '* * * * * *';

// Nest colours its log when it likes; the page's lines are matched without the colours.
const plain = (app: RunningApp) => app.output().replace(/\u001b\[[0-9;]*m/g, '');
const receipts = (output: string, orderId: string) => output.split(`receipt sent for ${orderId} (`).length - 1;
const MISMATCH_LOGGED =
  /ERROR \[Event\] This idempotency key was already used with a different request\.\nIdempotencyFingerprintMismatchError/;

/** Writes a script beside an app's build, as a test or a CLI of the user's would be: not the page's code. */
function script(dir: string, name: string, lines: string[]): string {
  writeFileSync(join(dir, 'dist', name), lines.join('\n'));
  return `dist/${name}`;
}

describe('docs/events-and-schedules.md, built and run as a user would', () => {
  const prefix = `docs-events-${process.pid}-${randomUUID().slice(0, 8)}`;
  const dirs = new Map<string, string>();
  let redis: Redis;

  beforeAll(async () => {
    for (const [name, dir] of await buildPageApps('events-and-schedules', ['default', 'enqueue'])) dirs.set(name, dir);
    redis = new Redis(REDIS_URL);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await deleteKeys(redis, prefix);
    redis.disconnect();
  });

  it('two instances on one Redis: a payment reported twice sends one receipt, another amount is refused and logged, each 2 s tick runs once', async () => {
    const env = { REDIS_URL, REDIS_PREFIX: `${prefix}-two`, SETTLEMENT_CRON: EVERY_2_SECONDS };
    const [a, b] = await Promise.all([startHttpApp(dirs.get('default')!, env), startHttpApp(dirs.get('default')!, env)]);
    try {
      const pay = (base: string, orderId: string, amount: number) =>
        requestJson(base, 'POST', `/orders/${orderId}/payment`, { body: { amount } });
      const both = () => plain(a.app) + plain(b.app);
      const orderId = `o_${process.pid}`;

      expect(await pay(a.base, orderId, 500)).toMatchObject({ status: 202, body: { orderId, amount: 500 } });
      await waitFor('the receipt', () => receipts(both(), orderId) === 1, 10_000);
      // The client retries, on either instance.
      expect((await pay(b.base, orderId, 500)).status).toBe(202);
      expect((await pay(a.base, orderId, 500)).status).toBe(202);
      // A later order's receipt on each instance: the duplicates emitted before it there have been answered.
      const later = `${orderId}_later`;
      await pay(a.base, later, 1);
      await pay(b.base, `${later}_b`, 1);
      await waitFor('the later receipts', () => receipts(plain(a.app), later) === 1 && receipts(plain(b.app), `${later}_b`) === 1, 10_000);
      expect(receipts(both(), orderId)).toBe(1);

      // The same order with another amount: the listener does not run, and the emitter logs the refusal.
      await pay(b.base, orderId, 900);
      await waitFor('the refusal in the log', () => MISMATCH_LOGGED.test(plain(b.app)), 10_000);
      expect(receipts(both(), orderId)).toBe(1);

      // Each tick of the 2 s schedule on one instance: the runs' 2 s slots are all different.
      const runs = () => [...both().matchAll(/settlement run at (\S+Z)/g)].map(([, at]) => Math.floor(Date.parse(at) / 2000));
      await waitFor('two settlement runs', () => runs().length >= 2, 15_000);
      expect(new Set(runs()).size).toBe(runs().length);
    } finally {
      await Promise.all([stopApp(a.app), stopApp(b.app)]);
    }
  });

  it('right after app.init() on Redis: a duplicated event sends one receipt and a tick called twice runs once, then the process ends by itself', async () => {
    const boot = script(dirs.get('default')!, 'right-after-boot.js', [
      "import { NestFactory } from '@nestjs/core';",
      "import { EventEmitter2 } from '@nestjs/event-emitter';",
      "import { AppModule } from './app.module.js';",
      "import { SettlementJobs } from './settlement.jobs.js';",
      'const app = await NestFactory.create(AppModule);',
      'await app.init();',
      'const events = app.get(EventEmitter2);',
      "const event = { orderId: 'o_boot', amount: 500 };",
      "await Promise.all([events.emitAsync('order.paid', event), events.emitAsync('order.paid', event)]);",
      'const jobs = app.get(SettlementJobs);',
      'await Promise.all([jobs.settle(), jobs.settle()]);',
      'await app.close();',
    ]);
    const { code, output } = await runApp(dirs.get('default')!, boot, { REDIS_URL, REDIS_PREFIX: `${prefix}-boot` }, 20_000);
    const log = output.replace(/\u001b\[[0-9;]*m/g, '');
    expect({ code, errors: log.split('\n').filter((line) => /ERROR|WARN|Error:/.test(line)) }).toEqual({ code: 0, errors: [] });
    expect(receipts(log, 'o_boot')).toBe(1);
    expect(log.match(/settlement run at/g)).toHaveLength(1);
  });

  it("the enqueueing variant: every tick adds the day's job, and a job added again after its removal is replayed, so the day is settled once; SIGTERM ends it", async () => {
    const bullPrefix = `${prefix}-enqueue`;
    const { app } = await startHttpApp(dirs.get('enqueue')!, { REDIS_URL, REDIS_PREFIX: bullPrefix, SETTLEMENT_CRON: EVERY_SECOND });
    const queue = new Queue('settlements', { connection: { url: REDIS_URL }, prefix: bullPrefix });
    try {
      const day = new Date().toISOString().slice(0, 10);
      const jobKey = `${bullPrefix}:settlements:settlement-${day}`;
      const finished = async () => (await redis.hexists(jobKey, 'finishedOn')) === 1;
      await waitFor('the settlement job', finished, 15_000);
      expect(plain(app).split(`settled ${day}`)).toHaveLength(2);
      // Gone from BullMQ (a retention setting, clean()), the job is added again by the next tick.
      await queue.remove(`settlement-${day}`);
      expect(await redis.exists(jobKey)).toBe(0);
      await waitFor('the next tick to add it and the worker to complete it', finished, 15_000);
      expect(plain(app).split(`settled ${day}`)).toHaveLength(2);
    } finally {
      await queue.close();
      await stopApp(app);
    }
  });
});
