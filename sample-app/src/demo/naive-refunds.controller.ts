import { Body, Controller, Headers, HttpCode, Inject, Post } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { NAIVE_ACCOUNT } from '../database.js';
import { Account, Refund } from '../entities.js';
import { DATA_SOURCE } from '../tokens.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));


/**
 * ANTI-EXAMPLE, registered only with SAMPLE_APP_DEMO_HOOKS=1 so that `npm run demo` can
 * show what the library prevents. The classic hand-rolled guard: "have we seen this key?
 * no: move the money, then record the key". Concurrent deliveries all pass the check
 * before any of them records the key; the unique index on `idem_key` refuses every row
 * but one, too late: the balance was already debited once per delivery, and the sender
 * got 500s. Compare with `RefundsController`.
 */
@Controller('demo')
export class NaiveRefundsController {
  constructor(@Inject(DATA_SOURCE) private readonly dataSource: DataSource) {}

  @Post('naive-refunds')
  @HttpCode(200)
  async refund(@Body() body: { amount: number }, @Headers('idempotency-key') key: string) {
    const refunds = this.dataSource.getRepository(Refund);
    if (await refunds.existsBy({ idemKey: `naive:${key}` })) return { duplicate: true }; // check ...
    await this.dataSource.getRepository(Account).decrement({ id: NAIVE_ACCOUNT }, 'balance', body.amount); // ... act ...
    await sleep(50); // (a call to the payment provider)
    await refunds.insert({ idemKey: `naive:${key}`, accountId: NAIVE_ACCOUNT, amount: body.amount, reason: 'naive' }); // ... record
    return { refunded: body.amount };
  }
}
