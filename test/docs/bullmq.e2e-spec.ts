import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { deleteKeys } from '../integrations/support.js';
import { buildPageApps, cleanUpDocApps, requestJson, runApp, startHttpApp, stopApp, waitFor } from './support/doc-app.js';

/**
 * docs/bullmq.md's application as a user meets it (test/docs/support/doc-app.ts): built
 * by `tsc` from the page's own files with getting-started's tsconfig.json, started with
 * `node dist/main.js`, on the real Redis. Its producer adds the refund job under the
 * business key: the same refund requested again after its job completed (and was
 * removed) is a new BullMQ job, which the processor's `@Idempotent()` completes with the
 * first one's value without paying out again; another amount under that id fails at
 * once. Each run has its own `REDIS_PREFIX` (the page's env var), so BullMQ's keys and
 * the records are this run's alone.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

interface Finished {
  event: 'completed' | 'failed';
  jobId: string;
  value: unknown;
}

describe('docs/bullmq.md, built and run as a user would', () => {
  const prefix = `docs-bullmq-${process.pid}-${randomUUID().slice(0, 8)}`;
  let dir: string;
  let redis: Redis;

  beforeAll(async () => {
    dir = (await buildPageApps('bullmq', ['default'])).get('default')!;
    redis = new Redis(REDIS_URL);
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    await deleteKeys(redis, prefix);
    redis.disconnect();
  });

  it('a refund requested twice is paid out once: both jobs complete with one payoutId; another amount fails at once; SIGTERM ends the process', async () => {
    // Every event of the queue's stream, from its start (the prefix is new), so none is missed.
    const events = new QueueEvents('refunds', { connection: { url: REDIS_URL }, prefix, lastEventId: '0' });
    const finished: Finished[] = [];
    events.on('completed', ({ jobId, returnvalue }) => finished.push({ event: 'completed', jobId, value: returnvalue }));
    events.on('failed', ({ jobId, failedReason }) => finished.push({ event: 'failed', jobId, value: failedReason }));
    const { base, app } = await startHttpApp(dir, { REDIS_URL, REDIS_PREFIX: prefix });
    try {
      const refundId = `rf_${process.pid}`;
      const jobId = `refund-${refundId}`;
      const request = (amount: number) => requestJson(base, 'POST', '/refunds', { body: { refundId, amount } });
      const payouts = () => [...app.output().matchAll(new RegExp(`paid out (\\d+) for ${refundId} \\((po_[0-9a-f-]+)\\)`, 'g'))];

      expect(await request(500)).toMatchObject({ status: 202, body: { jobId } });
      await waitFor('the first job to complete', () => finished.length === 1, 15_000);
      // removeOnComplete: BullMQ forgot the job, so the retried request adds a new one under the same id.
      await waitFor('BullMQ to remove the completed job', async () => (await redis.exists(`${prefix}:refunds:${jobId}`)) === 0, 5_000);
      expect(await request(500)).toMatchObject({ status: 202, body: { jobId } });
      await waitFor('the second job to complete', () => finished.length === 2, 15_000);

      expect(payouts()).toHaveLength(1);
      const [[, amount, payoutId]] = payouts();
      expect(amount).toBe('500');
      expect(finished).toEqual([
        { event: 'completed', jobId, value: { refundId, payoutId } },
        { event: 'completed', jobId, value: { refundId, payoutId } },
      ]);

      // The same id with another amount: the fingerprint differs, and the job fails on its first attempt of five.
      expect(await request(900)).toMatchObject({ status: 202, body: { jobId } });
      await waitFor('the third job to fail', () => finished.length === 3, 15_000);
      expect(finished[2]).toMatchObject({ event: 'failed', jobId, value: expect.stringMatching(/^IDEMPOTENCY_FINGERPRINT_MISMATCH/) });
      expect(await redis.hget(`${prefix}:refunds:${jobId}`, 'atm')).toBe('1');
      expect(payouts()).toHaveLength(1);
    } finally {
      await events.close();
      await stopApp(app);
    }
  });

  it('closes every connection it opened: the process ends by itself after app.close()', async () => {
    // Not the page's code: a script beside its build (an ES module, as the app's) that boots the page's AppModule and closes it, as a test or a CLI would.
    writeFileSync(
      join(dir, 'dist', 'close-check.js'),
      [
        "import { NestFactory } from '@nestjs/core';",
        "import { AppModule } from './app.module.js';",
        'const app = await NestFactory.create(AppModule, { logger: false });',
        'await app.init();',
        'await app.close();',
        "console.log('closed');",
      ].join('\n'),
    );
    const { code, output } = await runApp(dir, 'dist/close-check.js', { REDIS_URL, REDIS_PREFIX: prefix }, 20_000);
    expect({ code, output: output.trim() }).toEqual({ code: 0, output: 'closed' });
  });
});
