import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Job } from 'bullmq';
import type Redis from 'ioredis';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions, type IdempotentMethodOptions } from '../../lib/index.js';
import { REDIS_HOST, REDIS_PORT } from './support.js';

export interface RefundJob {
  orderId: string;
  /** Attempts that throw before the effect, to exercise BullMQ's retries. */
  failAttempts?: number;
  /** Holds the effect until the test sets the gate key in Redis. */
  gated?: boolean;
}

export interface RefundResult {
  refunded: string;
  /** How many times the effect had run when this attempt ran it (1 when it ran once). */
  n: number;
}

/** What a worker application of these tests is made of. */
export interface WorkerAppOptions {
  prefix: string;
  queue: string;
  /** Counts effects in Redis, shared by every worker process. */
  redis: Redis;
  idempotency: IdempotencyModuleOptions;
  /** `@Idempotent()` on `process(job)`: the defaults (key = job id) unless given. */
  processOptions?: IdempotentMethodOptions<[Job<RefundJob>]>;
  concurrency?: number;
  /** Short locks, so that a killed worker's job is seen as stalled within a second. */
  lockDuration?: number;
  stalledInterval?: number;
}

export const effectKey = (prefix: string, orderId: string) => `${prefix}:effects:${orderId}`;
export const gateKey = (prefix: string, orderId: string) => `${prefix}:gate:${orderId}`;

async function passGate(redis: Redis, key: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await redis.exists(key))) {
    if (Date.now() > deadline) throw new Error(`gate ${key} never opened`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A Nest application whose BullMQ processor refunds an order (INCR in Redis is the effect). */
export async function startWorkerApp(options: WorkerAppOptions): Promise<INestApplicationContext> {
  const { prefix, queue, redis } = options;

  @Processor(queue, {
    concurrency: options.concurrency ?? 1,
    lockDuration: options.lockDuration ?? 30_000,
    stalledInterval: options.stalledInterval ?? 30_000,
    drainDelay: 1,
  })
  class RefundProcessor extends WorkerHost {
    @Idempotent(options.processOptions ?? {})
    async process(job: Job<RefundJob>): Promise<RefundResult> {
      if (job.attemptsMade < (job.data.failAttempts ?? 0)) throw new Error(`gateway timeout (attempt ${job.attemptsMade + 1})`);
      if (job.data.gated) await passGate(redis, gateKey(prefix, job.data.orderId));
      const n = await redis.incr(effectKey(prefix, job.data.orderId));
      return { refunded: job.data.orderId, n };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRoot({ logger: false, ...options.idempotency }),
      BullModule.forRoot({ connection: { host: REDIS_HOST, port: REDIS_PORT }, prefix }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [RefundProcessor as Type<unknown>],
  })
  class WorkerModule {}
  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: false });
  await app.init();
  return app;
}
