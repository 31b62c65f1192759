import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Processor, WorkerHost } from '@nestjs/bullmq';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Queue, type Job } from 'bullmq';
import type Redis from 'ioredis';
import { Idempotent, IdempotencyModule, IdempotencyService } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { effectKey, gateKey, startWorkerApp, type RefundJob, type RefundResult, type WorkerAppOptions } from './bullmq-app.js';
import { REDIS_HOST, REDIS_PORT, deleteKeys, redisClient, runPrefix, until } from './support.js';

/**
 * `@Idempotent()` on `process(job)` of @nestjs/bullmq processors, with real BullMQ
 * workers on the real Redis: the effect (an INCR) runs once per key whatever BullMQ
 * delivers twice (duplicates, retries, stalled jobs of a killed worker).
 */
const WORKER = join(__dirname, 'fixtures', 'bullmq-worker.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');

const prefix = runPrefix('bullmq');
let redis: Redis;
const clients: Redis[] = [];
const apps: INestApplicationContext[] = [];
const queues: Queue[] = [];
const children: ChildProcess[] = [];
let sequence = 0;

function newQueue(): Queue {
  const queue = new Queue(`refunds-${++sequence}`, { connection: { host: REDIS_HOST, port: REDIS_PORT }, prefix });
  queues.push(queue);
  return queue;
}

function storeFor(): RedisIdempotencyStore {
  const client = redisClient();
  clients.push(client);
  return new RedisIdempotencyStore(client, { prefix: `${prefix}:idem:` });
}

async function worker(queue: Queue, options: Partial<WorkerAppOptions> = {}): Promise<INestApplicationContext> {
  const app = await startWorkerApp({ prefix, queue: queue.name, redis, idempotency: { store: storeFor() }, ...options });
  apps.push(app);
  return app;
}

type WorkerMessage = { ready?: boolean; stored?: boolean; claimed?: boolean };

/** A worker application in a process of its own (test/integrations/fixtures/bullmq-worker.ts), started. */
async function workerProcess(queue: Queue, mode: 'stop-after-store' | 'long-lease') {
  const child = fork(WORKER, [], {
    execArgv: ['--require', TS_REQUIRE],
    env: { ...process.env, PREFIX: prefix, QUEUE: queue.name, MODE: mode },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.push(child);
  const messages: WorkerMessage[] = [];
  child.on('message', (message) => messages.push(message as WorkerMessage));
  await until('the worker process to start', () => messages.some((m) => m.ready) || child.exitCode !== null, 30_000);
  expect(child.exitCode).toBeNull();
  return { child, messages };
}

const effects = async (orderId: string) => Number((await redis.get(effectKey(prefix, orderId))) ?? 0);

async function finished(queue: Queue, count: number): Promise<void> {
  await until(`${count} jobs of ${queue.name} to complete`, async () => (await queue.getJobCounts('completed')).completed >= count, 20_000);
}

beforeAll(() => {
  redis = redisClient();
});
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const app of apps) await app.close();
  for (const queue of queues) {
    await queue.obliterate({ force: true });
    await queue.close();
  }
  for (const client of clients) client.disconnect();
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

describe('@Idempotent() on a BullMQ processor (real workers, real Redis)', () => {
  it('runs the effect once for many duplicate jobs of one order taken at once by two workers', async () => {
    const queue = newQueue();
    const processOptions = { key: (job: Job<RefundJob>) => job.data.orderId };
    await worker(queue, { processOptions, concurrency: 10 });
    await worker(queue, { processOptions, concurrency: 10 });
    const orderId = `order-${sequence}`;
    await queue.addBulk(Array.from({ length: 40 }, (_, i) => ({ name: 'refund', data: { orderId }, opts: { jobId: `dup-${i}` } })));
    await finished(queue, 40);
    const jobs = await queue.getJobs(['completed']);
    expect(jobs).toHaveLength(40);
    for (const job of jobs) expect(job.returnvalue).toEqual({ refunded: orderId, n: 1 });
    expect(await effects(orderId)).toBe(1);
  });

  it('stops the boot for options a job has no use for, naming the processor', async () => {
    // Without BullModule (no worker to leave running when the boot fails): the processor is recognised by its metadata.
    @Processor('refunds-never-consumed')
    class HeaderProcessor extends WorkerHost {
      @Idempotent({ header: 'X-Key' } as never)
      async process(job: Job<RefundJob>) {
        return job.id;
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ logger: false })], providers: [HeaderProcessor] })
    class BootModule {}
    await expect(NestFactory.createApplicationContext(BootModule, { logger: false })).rejects.toThrow(
      /HeaderProcessor\.process: header does not apply to .*\(a BullMQ processor\)/,
    );
  });

  it('keys by job id by default: a job added again after it completed gets the stored result, and the scope is the queue', async () => {
    const queue = newQueue();
    const app = await worker(queue);
    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId }, { jobId: orderId, removeOnComplete: true });
    await until('the first job to run', async () => (await effects(orderId)) === 1);
    await until('the first job to be removed', async () => (await queue.getJob(orderId)) === undefined);
    // The producer publishes the same business key again (its own retry after a timeout).
    await queue.add('refund', { orderId }, { jobId: orderId });
    await finished(queue, 1);
    expect((await queue.getJob(orderId))?.returnvalue).toEqual({ refunded: orderId, n: 1 });
    expect(await effects(orderId)).toBe(1);
    const record = await app.get(IdempotencyService).inspect(orderId, { operation: `bullmq ${queue.name}` });
    expect(record?.status).toBe('completed');
  });

  it('fails a job that reuses a completed job id with other data at once, without using up its attempts', async () => {
    const queue = newQueue();
    await worker(queue);
    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId }, { jobId: orderId, removeOnComplete: true });
    await until(
      'the first job to run and be removed',
      async () => (await effects(orderId)) === 1 && (await queue.getJob(orderId)) === undefined,
    );
    await queue.add(
      'refund',
      { orderId, failAttempts: 0, gated: false },
      { jobId: orderId, attempts: 5, backoff: { type: 'fixed', delay: 50 } },
    );
    await until('the second job to fail', async () => (await queue.getJobState(orderId)) === 'failed');
    const job = (await queue.getJob(orderId))!;
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toMatch(/^IDEMPOTENCY_FINGERPRINT_MISMATCH: /);
    expect(await effects(orderId)).toBe(1);
  });

  it("releases the key when an attempt fails, so BullMQ's retry with backoff runs the job again, once", async () => {
    const queue = newQueue();
    await worker(queue);
    await worker(queue);
    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId, failAttempts: 2 }, { jobId: orderId, attempts: 4, backoff: { type: 'exponential', delay: 50 } });
    await finished(queue, 1);
    const job = (await queue.getJob(orderId))!;
    expect(job.attemptsMade).toBe(3);
    expect(job.returnvalue).toEqual({ refunded: orderId, n: 1 });
    expect(await effects(orderId)).toBe(1);
  });

  it('a job whose worker was killed (SIGKILL) after its result was stored is recovered as stalled and gets that result without running again', async () => {
    const queue = newQueue();
    const { child, messages } = await workerProcess(queue, 'stop-after-store');

    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId }, { jobId: orderId, attempts: 3 });
    await until('the worker process to store the result', () => messages.some((m) => m.stored === true));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    // Killed between storing the result and acknowledging the job: BullMQ still has it active.
    expect(await queue.getJobState(orderId)).toBe('active');
    expect(await effects(orderId)).toBe(1);

    // A second worker's stalled-job check finds the job once the dead worker's lock runs out.
    await worker(queue, { lockDuration: 1_000, stalledInterval: 300 });
    await finished(queue, 1);
    const job = (await queue.getJob(orderId))!;
    expect(job.returnvalue).toEqual<RefundResult>({ refunded: orderId, n: 1 });
    expect(await effects(orderId)).toBe(1);
  }, 40_000);

  it("a stalled job taken by a second worker while the first still runs it waits, fails as retriable, and BullMQ's retry gets the first attempt's result", async () => {
    const queue = newQueue();
    const { child, messages } = await workerProcess(queue, 'long-lease');
    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId, gated: true }, { jobId: orderId, attempts: 50, backoff: { type: 'fixed', delay: 100 } });
    await until('the worker process to claim the key', () => messages.some((m) => m.claimed));
    // Frozen mid-job (SIGSTOP): its BullMQ lock runs out, its 20 s lease does not.
    child.kill('SIGSTOP');
    await worker(queue, { lockDuration: 1_000, stalledInterval: 300, idempotency: { store: storeFor(), waitTimeout: 200 } });
    await until(
      'the second worker to fail an attempt on the running key',
      async () => ((await queue.getJob(orderId))?.attemptsMade ?? 0) >= 1,
    );
    expect(await effects(orderId)).toBe(0);
    // The first worker resumes and finishes its effect; the second one's next retry replays it.
    await redis.set(gateKey(prefix, orderId), '1');
    child.kill('SIGCONT');
    await finished(queue, 1);
    const job = (await queue.getJob(orderId))!;
    expect(job.returnvalue).toEqual<RefundResult>({ refunded: orderId, n: 1 });
    expect(job.failedReason).toMatch(/still being processed/);
    expect(await effects(orderId)).toBe(1);
  }, 40_000);
});
