import { BadRequestException, Body, Controller, HttpCode, Inject, Post } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { withLock, type LockProvider } from '../../../lib/locks/index.js';
import { executeIdempotentTransaction } from '../../../lib/typeorm/index.js';
import { Refund, Settlement } from '../entities.js';
import { DATA_SOURCE, LOCK_PROVIDER } from '../tokens.js';

/**
 * The end-of-day settlement: a job that every instance's scheduler (and an operator's
 * "run now" button) may start at the same moment. Two layers:
 *
 * - `withLock`: one run at a time per day, across instances (Redis with REDIS_URL); the
 *   others wait for the lock instead of computing the same totals in parallel.
 * - `executeIdempotentTransaction` keyed by the day: a run after the first one replays
 *   its result, so the settlement row is written once even when the lock lapsed
 *   (a paused process) or a retry comes hours later.
 */
@Controller('settlements')
export class SettlementController {
  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(LOCK_PROVIDER) private readonly locks: LockProvider,
  ) {}

  @Post('run')
  @HttpCode(200)
  async run(@Body() body: { day: string }) {
    if (typeof body?.day !== 'string' || !/^\d{4}-\d{2}-\d{2}$/.test(body.day)) throw new BadRequestException('Send { day: "YYYY-MM-DD" }.');
    const day = body.day;
    return withLock(
      this.locks,
      `settlement:${day}`,
      async (signal) => {
        const { value, replayed } = await executeIdempotentTransaction(this.dataSource, { key: day, scope: 'settlement' }, async (manager) => {
          const refunds = await manager.find(Refund, { select: { amount: true } });
          signal.throwIfAborted(); // the lock was lost: do not write as if we held it
          const refundsTotal = refunds.reduce((sum, refund) => sum + refund.amount, 0);
          await manager.save(manager.create(Settlement, { idemKey: day, day, refundsTotal }));
          return { day, refundsTotal };
        });
        return { ...value, replayed };
      },
      { ttl: 10_000, waitTimeout: 15_000 },
    );
  }
}
