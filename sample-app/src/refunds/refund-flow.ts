import { Inject, Injectable, NotFoundException } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { makeIdempotent, step, type IdempotencyStore, type IdempotentFunction } from '../../../lib/index.js';
import { executeIdempotentTransaction } from '../../../lib/typeorm/index.js';
import { pauseAfterStep } from '../demo/step-gate.js';
import { Account, Refund } from '../entities.js';
import { EventCounter } from '../ops/event-counter.js';
import { DATA_SOURCE, FLOW_STORE } from '../tokens.js';
import { Mailer, PaymentProvider } from './external-services.js';

export interface RefundRequest {
  accountId: string;
  /** Cents. */
  amount: number;
  /** Where the confirmation goes. */
  email: string;
}

export interface RefundResult {
  reference: string;
  accountId: string;
  amount: number;
  /** The payment provider's refund (`re_...`). */
  providerRefundId: string;
  /** Our ledger's refund row. */
  ledgerRefundId: number;
  balance: number;
  /** The confirmation e-mail (`em_...`). */
  emailId: string;
}

/** Demo-only switches (SAMPLE_APP_DEMO_HOOKS=1): never part of the fingerprint. */
export interface RefundFlowHooks {
  /** Hold the refund after this step, for the demo's SIGKILL (demo/step-gate.ts). */
  pauseAfterStep?: string;
}

/**
 * How long a refund whose process died blocks its retries, ms. The lease is renewed
 * every third of it while the flow runs, so it only has to outlast a renewal, not a refund.
 */
export const REFUND_LEASE_TTL = 5_000;

/**
 * A refund we start (support issues it; compare the provider's webhook in
 * ledger/refunds.controller.ts): three effects in two systems that are not our database.
 *
 * 1. `provider-refund`: the money goes back through the payment provider;
 * 2. `ledger`: the refund row and the balance change, in our database;
 * 3. `email`: the customer's confirmation.
 *
 * A process killed after step 1 must not refund twice when the client retries, and one
 * that failed at step 3 must not refund again to send the e-mail. So each effect is a
 * `step()`: a retry of the same refund (same key, same body), in this process or
 * another, gets the finished steps' recorded results and runs only the rest. Each step
 * also hands its `stepKey` downstream as the idempotency key, so a step cut off
 * mid-call (after the provider refunded, before the step was recorded) is refunded once
 * by the provider, which answers the retried call with the first refund.
 *
 * Why not one transaction, as the webhook does: no transaction can roll back a refund
 * at the provider or an e-mail, and `step()` is refused inside transactional handlers
 * (`transactional: true`, `runIdempotentTransaction`; docs/steps.md). So the flow is a
 * non-transactional execution, and the database work is a step of its own whose
 * transaction is keyed by that step's key: a kill after its commit and before the step
 * was recorded replays the transaction on the retry instead of debiting twice.
 *
 * Why its own store: steps are recorded where the execution's record lives, and the
 * module's store may be process memory (the embedded defaults), which a SIGKILL erases.
 * The flow's records and steps are in the business database (FLOW_STORE, a
 * TypeOrmIdempotencyStore), so a restarted process resumes the refund. The HTTP route
 * in front (refund-requests.controller.ts) keeps the HTTP contract on the module's store.
 */
@Injectable()
export class RefundFlow {
  readonly run: IdempotentFunction<[reference: string, request: RefundRequest, hooks?: RefundFlowHooks], Promise<RefundResult>>;

  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    @Inject(FLOW_STORE) store: IdempotencyStore,
    private readonly provider: PaymentProvider,
    private readonly mailer: Mailer,
    events: EventCounter,
  ) {
    this.run = makeIdempotent(
      (reference: string, request: RefundRequest, hooks?: RefundFlowHooks) => this.refund(reference, request, hooks),
      {
        store,
        scope: 'refund-flow',
        key: (reference) => reference,
        // The same key with another refund is refused; the demo's hooks are not the refund.
        fingerprint: (_reference, request) => request,
        leaseTtl: REFUND_LEASE_TTL,
        // A retry arriving while a dead process's lease runs out waits for it, then resumes.
        inFlight: 'wait',
        waitTimeout: 3 * REFUND_LEASE_TTL,
        onEvent: events.listener,
      },
    );
  }

  private async refund(reference: string, request: RefundRequest, hooks: RefundFlowHooks = {}): Promise<RefundResult> {
    // Before any effect: a refund for an unknown account must not reach the provider.
    if (!(await this.dataSource.getRepository(Account).existsBy({ id: request.accountId }))) {
      throw new NotFoundException(`Account ${request.accountId} does not exist.`);
    }
    const providerRefund = await step('provider-refund', (key) =>
      this.provider.refund({ accountId: request.accountId, amount: request.amount, reference }, { idempotencyKey: key }),
    );
    if (hooks.pauseAfterStep === 'provider-refund') await pauseAfterStep('provider-refund', reference);

    const ledger = await step('ledger', async (key) => {
      const { value } = await executeIdempotentTransaction(this.dataSource, { key, scope: 'refund-ledger' }, async (manager) => {
        const account = await manager.findOneByOrFail(Account, { id: request.accountId });
        // The row's unique key is the step's key: the last line of defence against a second row.
        const row = await manager.save(
          manager.create(Refund, {
            idemKey: key,
            accountId: request.accountId,
            amount: request.amount,
            reason: `provider:${providerRefund.id}`,
          }),
        );
        await manager.decrement(Account, { id: request.accountId }, 'balance', request.amount);
        return { refundId: row.id, balance: account.balance - request.amount };
      });
      return value;
    });
    if (hooks.pauseAfterStep === 'ledger') await pauseAfterStep('ledger', reference);

    const email = await step('email', (key) => this.mailer.send({ to: request.email, reference }, { idempotencyKey: key }));

    return {
      reference,
      accountId: request.accountId,
      amount: request.amount,
      providerRefundId: providerRefund.id,
      ledgerRefundId: ledger.refundId,
      balance: ledger.balance,
      emailId: email.id,
    };
  }
}
