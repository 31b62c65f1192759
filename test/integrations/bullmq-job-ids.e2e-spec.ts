import type { INestApplicationContext } from '@nestjs/common';
import { Queue, type Job } from 'bullmq';
import type Redis from 'ioredis';
import { IdempotencyService } from '../../lib/index.js';
import { defaultJobKey } from '../../lib/nest/transports/bullmq/bullmq.adapter.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { effectKey, startWorkerApp, type RefundJob, type RefundResult, type WorkerAppOptions } from './bullmq-app.js';
import { REDIS_HOST, REDIS_PORT, deleteKeys, redisClient, runPrefix, until } from './support.js';

/**
 * The default key of a BullMQ job: the producer's `jobId` as it is, and BullMQ's own
 * counter id with the time the job was added, because the counter restarts
 * (`obliterate()`, a flushed BullMQ Redis) while the idempotency store keeps its records.
 */
const prefix = runPrefix('bullmq-ids');
let redis: Redis;
const clients: Redis[] = [];
const apps: INestApplicationContext[] = [];
const queues: Queue[] = [];
let sequence = 0;

function newQueue(): Queue {
  const queue = new Queue(`ids-${++sequence}`, { connection: { host: REDIS_HOST, port: REDIS_PORT }, prefix });
  queues.push(queue);
  return queue;
}

async function worker(queue: Queue, options: Partial<WorkerAppOptions> = {}): Promise<INestApplicationContext> {
  const client = redisClient();
  clients.push(client);
  const store = new RedisIdempotencyStore(client, { prefix: `${prefix}:idem:` });
  const app = await startWorkerApp({ prefix, queue: queue.name, redis, idempotency: { store }, ...options });
  apps.push(app);
  return app;
}

const effects = async (orderId: string) => Number((await redis.get(effectKey(prefix, orderId))) ?? 0);

/** Waits until the job has finished (completed or failed) and returns it as BullMQ has it then. */
async function settled(queue: Queue, id: string): Promise<Job<RefundJob, RefundResult>> {
  await until(`job ${id} of ${queue.name} to finish`, async () => ['completed', 'failed'].includes(await queue.getJobState(id)), 20_000);
  return (await queue.getJob(id))!;
}

beforeAll(() => {
  redis = redisClient();
});
afterAll(async () => {
  for (const app of apps) await app.close();
  for (const queue of queues) {
    await queue.obliterate({ force: true });
    await queue.close();
  }
  for (const client of clients) client.disconnect();
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

describe('the default key of a BullMQ job', () => {
  it('is the custom jobId as it is, and a counter id with the time the job was added', () => {
    expect(defaultJobKey({ id: 'refund-rf_123', timestamp: 1_764_625_404_000 })).toBe('refund-rf_123');
    // Ids of BullMQ's job schedulers and repeatable jobs carry their own time.
    expect(defaultJobKey({ id: 'repeat:nightly:1764625404000', timestamp: 1_764_625_404_003 })).toBe('repeat:nightly:1764625404000');
    expect(defaultJobKey({ id: '7', timestamp: 1_764_625_404_000 })).toBe('7:1764625404000');
    expect(defaultJobKey({ id: '7', timestamp: '1764625404000' })).toBe('7:1764625404000');
    // Never a key that could name another job: a counter id without its time has none.
    expect(defaultJobKey({ id: '7' })).toBeUndefined();
    expect(defaultJobKey({ id: '7', timestamp: 'NaN' })).toBeUndefined();
    expect(defaultJobKey({ id: '' })).toBeUndefined();
    expect(defaultJobKey(undefined)).toBeUndefined();
  });

  it('runs the new jobs of a queue whose id counter restarted (obliterate): job 1 is not completed with the old job 1 value, job 2 is not refused', async () => {
    const queue = newQueue();
    await worker(queue);
    const [a, b, c] = [`a-${sequence}`, `b-${sequence}`, `c-${sequence}`];
    const first = await queue.add('refund', { orderId: a });
    expect((await settled(queue, first.id!)).returnvalue).toEqual({ refunded: a, n: 1 });
    const second = await queue.add('refund', { orderId: b });
    expect((await settled(queue, second.id!)).returnvalue).toEqual({ refunded: b, n: 1 });
    expect([first.id, second.id]).toEqual(['1', '2']);

    // The operator empties the queue; the idempotency store (another prefix, or another Redis) keeps its records.
    await queue.obliterate({ force: true });
    // A new refund of order a (the same payload as the old job 1), then another order.
    const again = await queue.add('refund', { orderId: a });
    const other = await queue.add('refund', { orderId: c });
    expect([again.id, other.id]).toEqual(['1', '2']);
    const againDone = await settled(queue, again.id!);
    const otherDone = await settled(queue, other.id!);
    expect({ state: await againDone.getState(), value: againDone.returnvalue }).toEqual({
      state: 'completed',
      value: { refunded: a, n: 2 },
    });
    expect({ state: await otherDone.getState(), reason: otherDone.failedReason, value: otherDone.returnvalue }).toEqual({
      state: 'completed',
      reason: undefined,
      value: { refunded: c, n: 1 },
    });
    expect([await effects(a), await effects(b), await effects(c)]).toEqual([2, 1, 1]);
  });

  it('stays the same key on every attempt of one job: a cached error of attempt 1 is thrown again to its retries', async () => {
    const queue = newQueue();
    const app = await worker(queue, {
      processOptions: { cacheErrors: (error: unknown) => error instanceof Error && error.message.startsWith('gateway timeout') },
    });
    const orderId = `order-${sequence}`;
    // Attempt 1 throws before the effect; attempts 2 and 3 would run it, were their key another.
    const job = await queue.add('refund', { orderId, failAttempts: 1 }, { attempts: 3, backoff: { type: 'fixed', delay: 20 } });
    const done = await settled(queue, job.id!);
    expect({ state: await done.getState(), attemptsMade: done.attemptsMade, reason: done.failedReason }).toEqual({
      state: 'failed',
      attemptsMade: 3,
      reason: 'gateway timeout (attempt 1)',
    });
    expect(await effects(orderId)).toBe(0);
    // job.retry() of the failed job is the same job again: the same key, the same cached error.
    await done.retry('failed');
    await until('the retried job to fail again', async () => {
      const [state, again] = await Promise.all([queue.getJobState(job.id!), queue.getJob(job.id!)]);
      return state === 'failed' && (again?.attemptsMade ?? 0) === 4;
    });
    const retried = (await queue.getJob(job.id!))!;
    expect({ reason: retried.failedReason, timestamp: retried.timestamp }).toEqual({
      reason: 'gateway timeout (attempt 1)',
      timestamp: job.timestamp,
    });
    expect(await effects(orderId)).toBe(0);
    // The record is found under the documented key: the id, a colon, the time the job was added.
    const record = await app.get(IdempotencyService).inspect(`${job.id}:${job.timestamp}`, { operation: `bullmq ${queue.name}` });
    expect(record?.status).toBe('completed');
  });

  it('keeps a custom jobId a business key: the same jobId added again after its job was removed gets the stored result', async () => {
    const queue = newQueue();
    await worker(queue);
    const orderId = `order-${sequence}`;
    await queue.add('refund', { orderId }, { jobId: `refund-${orderId}`, removeOnComplete: true });
    await until(
      'the first job to run and be removed',
      async () => (await effects(orderId)) === 1 && !(await queue.getJob(`refund-${orderId}`)),
    );
    await queue.add('refund', { orderId }, { jobId: `refund-${orderId}` });
    const done = await settled(queue, `refund-${orderId}`);
    expect(done.returnvalue).toEqual({ refunded: orderId, n: 1 });
    expect(await effects(orderId)).toBe(1);
  });
});
