import { BadRequestException, Body, Controller, Get, Headers, HttpCode, Inject, NotFoundException, Param, Post, Res } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { executeIdempotentTransaction } from '../../../lib/typeorm/index.js';
import type { SampleAppConfig } from '../config.js';
import { clientKeyOf } from '../idempotency-key.js';
import { Account, Refund } from '../entities.js';
import { DATA_SOURCE, SAMPLE_APP_CONFIG } from '../tokens.js';

interface RefundWebhook {
  accountId: string;
  amount: number;
  reason?: string;
}

interface HeaderWriter {
  setHeader(name: string, value: string): unknown;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A payment provider's refund webhook. Providers retry until they get a 2xx, often
 * concurrently, and the same refund must move money once. Two layers:
 *
 * 1. `@Idempotent()`: the HTTP contract (400 without a key, 422 for a reused key, 409
 *    while the first delivery runs, replay with `Idempotent-Replayed: true`), on the
 *    module's store (memory, or Redis with REDIS_URL).
 * 2. `executeIdempotentTransaction`: the refund row, the balance change and the
 *    idempotency record commit in ONE database transaction. A crash before the commit
 *    leaves nothing behind, so the retry runs cleanly; a retry after the commit gets the
 *    stored result even when layer 1 lost its record (memory store, process restarted).
 */
@Controller()
export class RefundsController {
  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(SAMPLE_APP_CONFIG) private readonly config: SampleAppConfig,
  ) {}

  @Post('webhooks/refunds')
  @HttpCode(200)
  @Idempotent()
  async refund(
    @Body() body: RefundWebhook,
    @Headers() headers: Record<string, string | undefined>,
    @Headers('x-demo-delay-ms') demoDelay: string | undefined,
    @Res({ passthrough: true }) response: HeaderWriter,
  ) {
    if (!Number.isInteger(body?.amount) || body.amount <= 0 || typeof body.accountId !== 'string') {
      throw new BadRequestException('Send { accountId: string, amount: positive integer (cents) }.');
    }
    const idemKey = clientKeyOf(headers);
    const { value, replayed } = await executeIdempotentTransaction(
      this.dataSource,
      { key: idemKey, scope: 'refund-webhook', fingerprint: body },
      async (manager) => {
        const account = await manager.findOneBy(Account, { id: body.accountId });
        if (!account) throw new NotFoundException(`Account ${body.accountId} does not exist.`);
        const refund = await manager.save(manager.create(Refund, { idemKey, accountId: body.accountId, amount: body.amount, reason: body.reason ?? 'requested_by_customer' }));
        await manager.decrement(Account, { id: body.accountId }, 'balance', body.amount);
        if (this.config.demoHooks && demoDelay) await sleep(Number(demoDelay)); // the demo's crash window
        return { refundId: refund.id, accountId: body.accountId, amount: body.amount, balance: account.balance - body.amount };
      },
    );
    // The database layer replayed: the first delivery committed, then its HTTP record was lost.
    if (replayed) response.setHeader('Idempotent-Replayed', 'true');
    return value;
  }

  @Get('accounts/:id')
  async account(@Param('id') id: string) {
    const account = await this.dataSource.getRepository(Account).findOneBy({ id });
    if (!account) throw new NotFoundException(`Account ${id} does not exist.`);
    return { id: account.id, balance: account.balance };
  }
}
