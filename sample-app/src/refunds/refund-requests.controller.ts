import { BadRequestException, Body, Controller, Headers, HttpCode, Inject, Post } from '@nestjs/common';
import { Idempotent } from '../../../lib/index.js';
import type { SampleAppConfig } from '../config.js';
import { clientKeyOf } from '../idempotency-key.js';
import { SAMPLE_APP_CONFIG } from '../tokens.js';
import { REFUND_LEASE_TTL, RefundFlow, type RefundRequest } from './refund-flow.js';

/**
 * `POST /refunds`: support refunds a customer. Two layers, like the webhook's:
 *
 * 1. `@Idempotent()`: the HTTP contract (400 without a key, 422 for a reused key, 409
 *    while the first request runs, replay with `Idempotent-Replayed: true`), on the
 *    module's store.
 * 2. `RefundFlow.run`: the refund's three effects as durable steps, recorded in the
 *    database, so a retry after a crash (or after a failed step) resumes where the
 *    first attempt stopped, even when layer 1 forgot the request (memory store,
 *    process restarted).
 *
 * Its lease is the flow's: a crashed refund blocks its retries for a few seconds, not
 * for the default 30 s.
 */
@Controller('refunds')
export class RefundRequestsController {
  constructor(
    private readonly flow: RefundFlow,
    @Inject(SAMPLE_APP_CONFIG) private readonly config: SampleAppConfig,
  ) {}

  @Post()
  @HttpCode(200)
  @Idempotent({ leaseTtl: REFUND_LEASE_TTL })
  async refund(
    @Body() body: Omit<RefundRequest, 'email'> & { email?: string },
    @Headers() headers: Record<string, string | undefined>,
    @Headers('x-demo-pause-after-step') pause: string | undefined,
  ) {
    if (!Number.isInteger(body?.amount) || body.amount <= 0 || typeof body.accountId !== 'string') {
      throw new BadRequestException('Send { accountId: string, amount: positive integer (cents), email?: string }.');
    }
    const request: RefundRequest = { accountId: body.accountId, amount: body.amount, email: body.email ?? 'customer@example.com' };
    const hooks = this.config.demoHooks && pause ? { pauseAfterStep: pause } : undefined;
    return this.flow.run(clientKeyOf(headers), request, hooks);
  }
}
