import { Module, type DynamicModule } from '@nestjs/common';

/**
 * Refunds paid out by a BullMQ worker (sample-app/src/jobs/refund-jobs.processor.ts),
 * when `BULLMQ_URL` names a Redis for the queue (the demo sets it when Redis answers).
 * Without it the module is empty and neither bullmq nor @nestjs/bullmq is loaded: the
 * sample app keeps running with no service at all.
 *
 * - `BULLMQ_URL`: e.g. `redis://127.0.0.1:6379`
 * - `BULLMQ_PREFIX`: prefix of the queue's Redis keys, so several runs can share one Redis (default `sample-app-bull`)
 */
@Module({})
export class RefundJobsModule {
  static async fromEnv(env: NodeJS.ProcessEnv = process.env): Promise<DynamicModule> {
    if (!env.BULLMQ_URL) return { module: RefundJobsModule };
    const { refundJobsModule } = await import('./refund-jobs.processor.js');
    return { module: RefundJobsModule, imports: [refundJobsModule(env.BULLMQ_URL, env.BULLMQ_PREFIX || 'sample-app-bull')] };
  }
}
