import { Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { supportsOutbox } from '../core/outbox.js';
import type { IdempotencyStore } from '../core/store.js';
import { IdempotencyService } from '../nest/idempotency.service.js';

/** Options of `IdempotencyOutboxHealthIndicator.isHealthy`. */
export interface IdempotencyOutboxHealthOptions {
  /**
   * Oldest age a waiting message may reach, ms: an older one means the relays cannot
   * send (the broker is away, no instance runs a relay), and the check is `down`.
   * @default 60000
   */
  maxAge?: number;
  /**
   * Longest wait for the store's answer, ms.
   * @default 1000
   */
  timeout?: number;
  /**
   * The store whose outbox is checked.
   * @default the module's store (`IdempotencyService.store`)
   */
  store?: IdempotencyStore;
}

/**
 * A `@nestjs/terminus` health indicator for the outbox (docs/outbox.md): `up` with the
 * backlog (`pending` executions, `oldestAgeMs`), `down` once the oldest waiting message
 * is older than `maxAge`, or when the store does not answer. Provide it in a module that
 * imports `TerminusModule`:
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.outbox.isHealthy('outbox', { maxAge: 60_000 })]); }
 * ```
 */
@Injectable()
export class IdempotencyOutboxHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly idempotency: IdempotencyService,
  ) {}

  /** `{ [key]: { status: 'up', pending, oldestAgeMs } }`, or `status: 'down'` with a `message`. */
  async isHealthy<const Key extends string = 'outbox'>(
    key: Key = 'outbox' as Key,
    options: IdempotencyOutboxHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const session = this.indicators.check(key);
    const store = options.store ?? this.idempotency.store;
    const maxAge = options.maxAge ?? 60_000;
    const timeout = options.timeout ?? 1_000;
    if (!supportsOutbox(store)) return session.down({ message: `${store.constructor?.name ?? 'the store'} has no outbox` });
    let timer: NodeJS.Timeout | undefined;
    try {
      const backlog = await Promise.race([
        store.outboxBacklog(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`the outbox backlog was not read within ${timeout} ms (timeout option of isHealthy)`)),
            timeout,
          );
        }),
      ]);
      const oldestAgeMs = backlog.oldestStagedAt === undefined ? 0 : Math.max(0, Date.now() - backlog.oldestStagedAt);
      const details = { pending: backlog.pending, oldestAgeMs };
      if (oldestAgeMs > maxAge)
        return session.down({ ...details, message: `the oldest waiting message is ${oldestAgeMs} ms old, over maxAge (${maxAge} ms)` });
      return session.up(details);
    } catch (error) {
      return session.down({ message: error instanceof Error ? error.message : String(error) });
    } finally {
      clearTimeout(timer);
    }
  }
}
