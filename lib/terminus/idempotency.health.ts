// Subpath `nestjs-idempotency/terminus`: the only module that imports @nestjs/terminus.
import { Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from '../core/store.js';
import { IdempotencyService } from '../nest/idempotency.service.js';

/** Options of `IdempotencyHealthIndicator.isHealthy`. */
export interface IdempotencyHealthCheckOptions {
  /**
   * Longest wait for the store's answer, ms; a slower store is reported `down`.
   * @default 1000
   */
  timeout?: number;
  /**
   * The store to probe.
   * @default the module's store (`IdempotencyService.store`)
   */
  store?: IdempotencyStore;
}

/** Default `timeout` of `IdempotencyHealthIndicator.isHealthy`, ms. */
export const DEFAULT_HEALTH_TIMEOUT = 1_000;

/**
 * A `@nestjs/terminus` health indicator for the idempotency store: with the store
 * down, every `@Idempotent()` request fails closed with 503, so the instance should
 * leave the load balancer. Uses `store.ping()` when the store has it, else reads a
 * random key. Provide it in a module that imports `TerminusModule`:
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.idempotency.isHealthy('idempotency')]); }
 * ```
 */
@Injectable()
export class IdempotencyHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly idempotency: IdempotencyService,
  ) {}

  /**
   * `{ [key]: { status: 'up', responseTimeMs } }`, or `status: 'down'` with the
   * `message` of the failure (Terminus then answers 503).
   */
  async isHealthy<const Key extends string = 'idempotency'>(
    key: Key = 'idempotency' as Key,
    options: IdempotencyHealthCheckOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const session = this.indicators.check(key);
    const store = options.store ?? this.idempotency.store;
    const timeout = options.timeout ?? DEFAULT_HEALTH_TIMEOUT;
    const startedAt = Date.now();
    try {
      await withTimeout(probe(store), timeout);
      return session.up({ responseTimeMs: Date.now() - startedAt });
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return session.down({ message, responseTimeMs: Date.now() - startedAt });
    }
  }
}

async function probe(store: IdempotencyStore): Promise<void> {
  if (typeof store.ping === 'function') {
    await store.ping();
    return;
  }
  // Store keys are [A-Za-z0-9_-] (see IdempotencyStore); this one never exists.
  await store.get(`health-check-${randomUUID()}`);
}

function withTimeout(work: Promise<void>, timeout: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the idempotency store did not answer within ${timeout} ms (timeout option of isHealthy)`)),
      timeout,
    );
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}
