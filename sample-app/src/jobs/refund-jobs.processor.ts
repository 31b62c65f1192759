import { BullModule, InjectQueue, Processor, WorkerHost } from '@nestjs/bullmq';
import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  Module,
  NotFoundException,
  Param,
  Post,
  type DynamicModule,
} from '@nestjs/common';
import type { Job, Queue } from 'bullmq';
import { Idempotent } from '../../../lib/index.js';

export const REFUND_JOBS_QUEUE = 'sample-app.refund-jobs';

export interface RefundPayoutJob {
  refundId: string;
  amount: number;
  /** The payment provider times out on the first attempt (the demo's flaky provider). */
  flakyProvider?: boolean;
}

/** Payouts sent to the "payment provider", by refund id: the side effect the demo counts. */
export class PayoutLedger {
  private readonly payouts = new Map<string, number>();
  pay(refundId: string): number {
    const n = (this.payouts.get(refundId) ?? 0) + 1;
    this.payouts.set(refundId, n);
    return n;
  }
  count(refundId: string): number {
    return this.payouts.get(refundId) ?? 0;
  }
}

/**
 * Pays a refund out, once per job id. The producer sets the job id to the refund id, so
 * a refund enqueued twice (a retried request, a replayed event) is one key; a failed
 * attempt releases it for BullMQ's retry (`attempts` + `backoff`), and a job that comes
 * back after its payout was stored (stalled, re-added) gets the stored payout instead of
 * paying again.
 */
@Processor(REFUND_JOBS_QUEUE, { concurrency: 5 })
export class RefundPayoutProcessor extends WorkerHost {
  constructor(private readonly ledger: PayoutLedger) {
    super();
  }

  @Idempotent()
  async process(job: Job<RefundPayoutJob>): Promise<{ refundId: string; payout: number; attempt: number }> {
    if (job.data.flakyProvider && job.attemptsMade === 0) throw new Error('payment provider timed out');
    const payout = this.ledger.pay(job.data.refundId);
    return { refundId: job.data.refundId, payout, attempt: job.attemptsMade + 1 };
  }
}

/** Enqueues refund payouts and reports them (the demo's window on the queue). */
@Controller('jobs/refunds')
export class RefundJobsController {
  constructor(
    @InjectQueue(REFUND_JOBS_QUEUE) private readonly queue: Queue<RefundPayoutJob>,
    private readonly ledger: PayoutLedger,
  ) {}

  @Post()
  @HttpCode(202)
  async enqueue(@Body() body: RefundPayoutJob) {
    if (typeof body?.refundId !== 'string' || typeof body.amount !== 'number') throw new BadRequestException('Send { refundId, amount }.');
    const job = await this.queue.add('payout', body, {
      jobId: `refund-${body.refundId}`,
      attempts: 3,
      backoff: { type: 'fixed', delay: 100 },
      removeOnComplete: { age: 60 },
    });
    return { jobId: job.id };
  }

  @Get(':refundId')
  async show(@Param('refundId') refundId: string) {
    const job = await this.queue.getJob(`refund-${refundId}`);
    if (!job) throw new NotFoundException(`no job for refund ${refundId}`);
    return { state: await job.getState(), attemptsMade: job.attemptsMade, result: job.returnvalue, payouts: this.ledger.count(refundId) };
  }

  /** Removes a finished job, so that enqueueing the refund again adds a new job under the same id. */
  @Post(':refundId/remove')
  @HttpCode(200)
  async remove(@Param('refundId') refundId: string) {
    await this.queue.remove(`refund-${refundId}`);
    return { removed: true };
  }
}

export function refundJobsModule(url: string, prefix: string): DynamicModule {
  @Module({
    imports: [
      BullModule.forRoot({ connection: { host: new URL(url).hostname, port: Number(new URL(url).port || 6379) }, prefix }),
      BullModule.registerQueue({ name: REFUND_JOBS_QUEUE }),
    ],
    controllers: [RefundJobsController],
    providers: [PayoutLedger, RefundPayoutProcessor],
  })
  class RefundJobsFeature {}
  return { module: RefundJobsFeature };
}
