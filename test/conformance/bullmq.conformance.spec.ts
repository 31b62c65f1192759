import { BullModule, Processor, WorkerHost, getQueueToken } from '@nestjs/bullmq';
import { Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Job, Queue, Worker } from 'bullmq';
import type Redis from 'ioredis';
import { Idempotent, IdempotencyModule, isIdempotencyError } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { REDIS_HOST, REDIS_PORT, deleteKeys, redisClient, runPrefix } from '../integrations/support.js';
import { describeTransportConformance, type Answer, type ConformanceDriver } from './conformance.js';
import { RICH_VALUES, richReplays } from './in-process.js';
import { stepProbe } from './steps.js';

/**
 * `process(job)` of @nestjs/bullmq processors on the real Redis, with the default key.
 * The caller is BullMQ's worker: what it saw is the value `process()` returned (its
 * `completed` event) or the error it threw (its `failed` event). The key is the jobId a
 * producer sets (a business key); there is no principal in a job, so the tenant goes into
 * the jobId. Jobs are removed once finished, so a jobId can be added again.
 */
type BullSeen =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: Error & { code?: string; cause?: unknown }; readonly attemptsMade: number };

interface JobData {
  readonly tenant?: string;
  readonly input: unknown;
}

const effects = new Effects();
const prefix = runPrefix('conformance-bullmq');
const QUEUES = ['billing', 'shipping', 'rich', 'steps'] as const;
const ATTEMPTS = 3;

function processorModule(queue: string): { module: Type<unknown>; processor: Type<WorkerHost> } {
  /** Both feature modules name their processor RefundProcessor. */
  @Processor(queue, { drainDelay: 1 })
  class RefundProcessor extends WorkerHost {
    @Idempotent()
    async process(job: Job<JobData>): Promise<unknown> {
      if (queue === 'steps') await stepProbe.run();
      const run = effects.hit(queue);
      if (queue === 'rich') return RICH_VALUES[job.data.input as string](run);
      return { operation: queue, principal: job.data.tenant, run } satisfies Answer;
    }
  }
  @Module({ imports: [BullModule.registerQueue({ name: queue })], providers: [RefundProcessor] })
  class FeatureModule {}
  return { module: FeatureModule, processor: RefundProcessor };
}

const modules = Object.fromEntries(QUEUES.map((queue) => [queue, processorModule(queue)]));
let app: INestApplicationContext;
let redis: Redis;
const waiting = new Map<string, (seen: BullSeen) => void>();

function watch(worker: Worker): void {
  worker.on('completed', (job, value) => waiting.get(job.id!)?.({ ok: true, value }));
  worker.on('failed', (job, error) => {
    // A failure BullMQ will retry is not the caller's final answer.
    if (!job || (job.attemptsMade < ATTEMPTS && error.name !== 'UnrecoverableError')) return;
    waiting.get(job.id!)?.({ ok: false, error, attemptsMade: job.attemptsMade });
  });
}

function describeSeen(seen: BullSeen): string {
  return seen.ok ? `the value ${JSON.stringify(seen.value)}` : `${seen.error.name}: ${seen.error.message}`;
}

/** Values BullMQ itself can store as a job's return value (it JSON-encodes it: no bigint). */
const storable = Object.keys(RICH_VALUES).filter((kind) => {
  try {
    JSON.stringify(RICH_VALUES[kind](1));
    return true;
  } catch {
    return false;
  }
});

const driver: ConformanceDriver<unknown, BullSeen> = {
  entry: 'bullmq',
  async boot(store) {
    redis = redisClient();
    @Module({
      imports: [
        IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }),
        BullModule.forRoot({ connection: { host: REDIS_HOST, port: REDIS_PORT }, prefix }),
        ...QUEUES.map((queue) => modules[queue].module),
      ],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
    for (const queue of QUEUES) {
      const processor = app.get(modules[queue].processor);
      watch(processor.worker);
      await processor.worker.waitUntilReady();
    }
  },
  async close() {
    await app?.close();
    await deleteKeys(redis, prefix);
    redis?.disconnect();
  },
  async call({ operation, key, principal, input }) {
    const queue = app.get<Queue>(getQueueToken(operation));
    const jobId = key === undefined ? undefined : principal ? `${principal}.${key}` : key;
    let settle!: (seen: BullSeen) => void;
    const answer = new Promise<BullSeen>((resolve) => (settle = resolve));
    // The id is known once added; a listener keyed by jobId is set first, for a job that finishes at once.
    const pending = jobId ?? `auto-${Math.random()}`;
    waiting.set(pending, settle);
    const job = await queue.add('refund', { tenant: principal, input } satisfies JobData, {
      jobId,
      attempts: ATTEMPTS,
      removeOnComplete: true,
      removeOnFail: true,
    });
    if (job.id !== pending) waiting.set(job.id!, settle);
    const timeout = setTimeout(
      () => settle({ ok: false, error: new Error(`job ${job.id} did not finish within 15 s`), attemptsMade: -1 }),
      15_000,
    );
    try {
      return await answer;
    } finally {
      clearTimeout(timeout);
      waiting.delete(pending);
      waiting.delete(job.id!);
    }
  },
  answerOf(seen) {
    if (!seen.ok) throw new Error(`expected the job to complete, it failed: ${describeSeen(seen)}`);
    return seen.value as Answer;
  },
  refusalOf(seen) {
    if (seen.ok) return undefined;
    if (isIdempotencyError(seen.error.cause)) return seen.error.cause.code;
    if (isIdempotencyError(seen.error)) return seen.error.code;
    throw new Error(`expected the library's refusal, the job failed with ${describeSeen(seen)}`);
  },
  expectRefusalShape(seen, code) {
    // A refusal every attempt would meet again fails the job at once (BullMQ's UnrecoverableError), the library's error as cause.
    expect(seen.ok).toBe(false);
    const failed = seen as Extract<BullSeen, { ok: false }>;
    expect(failed.error.name).toBe('UnrecoverableError');
    expect(failed.error.code).toBe(code);
    expect(isIdempotencyError(failed.error.cause) && failed.error.cause.code).toBe(code);
    expect(failed.attemptsMade).toBe(1);
  },
  runs: (operation) => effects.count(operation),
  input: { amount: 10 },
  principals: { operation: 'billing', via: ['the jobId (the tenant in the business key)'] },
  operations: [{ name: 'two queues whose processors’ classes share a name (RefundProcessor in two modules)', a: 'billing', b: 'shipping' }],
  inputs: { operation: 'billing', pairs: [{ name: 'other job data', a: { amount: 1 }, b: { amount: 2 } }] },
  replays: richReplays('rich', (kind) => kind).filter((replay) => storable.some((kind) => replay.name.startsWith(`${kind}:`))),
  refusals: { operation: 'billing', missingKey: false },
  steps: { operation: 'steps', probe: stepProbe, retriedByTransport: true },
  inFlight: {
    notApplicable:
      'an attempt that meets a running one waits for it (the default) or fails an attempt BullMQ retries: no in-flight refusal reaches the producer',
  },
};

describeTransportConformance('process(job) of a BullMQ WorkerHost', driver);
