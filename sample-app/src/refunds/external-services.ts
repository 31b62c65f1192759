import { Inject, Injectable } from '@nestjs/common';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { SampleAppConfig } from '../config.js';
import { SAMPLE_APP_CONFIG } from '../tokens.js';

/** One effect a fake service had: what it did, for which of our refunds. */
export interface ExternalEffect {
  readonly id: string;
  /** Our refund this effect belongs to (the client's key), like Stripe's `metadata`. */
  readonly reference: string;
  readonly amount?: number;
  readonly to?: string;
}

/** Everything the two fakes remember: the effects they had and every call they received. */
interface ServicesState {
  calls: { refund: number; email: number };
  refunds: ExternalEffect[];
  emails: ExternalEffect[];
  /** `service:idempotency key` -> the effect the first call with that key had. */
  byKey: Record<string, ExternalEffect>;
}

/**
 * The state of the fake payment provider and the fake mailer. A real provider lives in
 * another system, so what it did survives a crash of THIS process: with `SERVICES_FILE`
 * (the demo and the crash test set it) the state is a JSON file written before each call
 * answers, and a restarted process reads it back. Without it, process memory.
 */
@Injectable()
export class ExternalServicesState {
  private readonly file: string | undefined;
  private state: ServicesState = { calls: { refund: 0, email: 0 }, refunds: [], emails: [], byKey: {} };

  constructor(@Inject(SAMPLE_APP_CONFIG) config: SampleAppConfig) {
    this.file = config.servicesFile;
    if (this.file && existsSync(this.file)) this.state = JSON.parse(readFileSync(this.file, 'utf8')) as ServicesState;
  }

  /**
   * One call to a service: counted, and de-duplicated by `idempotencyKey` the way Stripe
   * does (the same key answers with the first effect and does nothing). A call without a
   * key always has its effect.
   */
  call(service: 'refund' | 'email', idempotencyKey: string | undefined, effect: () => Omit<ExternalEffect, 'id'>): ExternalEffect {
    this.state.calls[service]++;
    const known = idempotencyKey === undefined ? undefined : this.state.byKey[`${service}:${idempotencyKey}`];
    if (known) return this.save(known);
    const list = service === 'refund' ? this.state.refunds : this.state.emails;
    const done = { id: `${service === 'refund' ? 're' : 'em'}_${list.length + 1}`, ...effect() };
    list.push(done);
    if (idempotencyKey !== undefined) this.state.byKey[`${service}:${idempotencyKey}`] = done;
    return this.save(done);
  }

  /** What GET /stats shows: calls received and effects had, by our refund's reference. */
  snapshot() {
    return {
      paymentProvider: { calls: this.state.calls.refund, refunds: this.state.refunds.map((r) => r.reference) },
      mailer: { calls: this.state.calls.email, emails: this.state.emails.map((e) => e.reference) },
    };
  }

  private save(answer: ExternalEffect): ExternalEffect {
    if (this.file) {
      // Written (atomically: a kill mid-write leaves the old file) before the call answers.
      writeFileSync(`${this.file}.tmp`, JSON.stringify(this.state));
      renameSync(`${this.file}.tmp`, this.file);
    }
    return answer;
  }
}

/** Stands for Stripe's refunds API: `idempotencyKey` is its `Idempotency-Key` header. */
@Injectable()
export class PaymentProvider {
  constructor(private readonly services: ExternalServicesState) {}

  async refund(
    request: { accountId: string; amount: number; reference: string },
    options: { idempotencyKey?: string } = {},
  ): Promise<ExternalEffect> {
    return this.services.call('refund', options.idempotencyKey, () => ({ reference: request.reference, amount: request.amount }));
  }
}

/**
 * Stands for a transactional e-mail API (Postmark, SendGrid, SES all take an idempotency
 * key or a message id to de-duplicate on). `failNext` makes the next sends fail, the way
 * an outage does (tests).
 */
@Injectable()
export class Mailer {
  failNext = 0;

  constructor(private readonly services: ExternalServicesState) {}

  async send(message: { to: string; reference: string }, options: { idempotencyKey?: string } = {}): Promise<ExternalEffect> {
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('mailer unavailable (503)');
    }
    return this.services.call('email', options.idempotencyKey, () => ({ reference: message.reference, to: message.to }));
  }
}
