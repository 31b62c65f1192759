import type { LoggerService } from '@nestjs/common';
import { IdempotencyErrorCode, isIdempotencyError, type IdempotencyError, type IdempotencyEventListener } from '../core/index.js';
import { formatIdempotencyEvent } from '../observability/logger.js';

/** One line per cause per this many ms: an outage must not flood the log. */
export const LOG_RATE_LIMIT_MS = 10_000;
/** Causes remembered for rate limiting; past it the oldest are forgotten (bounded memory under hostile input). */
const MAX_CAUSES = 1_000;

/**
 * What the module logs by default, through Nest's `Logger` (context `Idempotency`):
 * what the library refused or lost, never routine traffic. Store errors and outages,
 * fail-open runs, lost leases and memory evictions are `warn`; configuration errors
 * are `error`. Keys appear hashed. Each cause is logged at most once per 10 s, and the
 * next line says how many were suppressed.
 */
export class IdempotencyLog {
  private readonly causes = new Map<string, { until: number; suppressed: number }>();

  /** Feeds the events worth a line to the logger; every other event returns at once. */
  readonly listener: IdempotencyEventListener = (event) => {
    switch (event.type) {
      case 'store_error':
        // A store that reports a configuration error (a missing table) is not an outage:
        // the request path logs it as a configuration error.
        if (isIdempotencyError(event.error) && event.error.code === IdempotencyErrorCode.Configuration) return;
        return this.warn(
          `store_error:${event.failOpen ? 'open' : 'closed'}:${causeOf(event.error)}`,
          event.failOpen
            ? `The idempotency store failed and the handler ran WITHOUT protection (onStoreError: 'fail-open'). ${formatIdempotencyEvent(event)}`
            : `The idempotency store failed. ${formatIdempotencyEvent(event)}`,
        );
      case 'lease_lost':
        return this.warn(
          `lease_lost:${event.handler ?? ''}`,
          `A lease was lost: another worker may run the same key again. Raise leaseTtl above the handler's longest run. ${formatIdempotencyEvent(event)}`,
        );
      case 'evicted_before_expiry':
        return this.warn(
          'evicted_before_expiry',
          `The memory store dropped a result before its ttl (${event.reason ?? 'store full'}): a retry with that key would run the handler again. ` +
            'Raise MemoryIdempotencyStore maxEntries, or use the Redis or TypeORM store (docs/getting-started.md).',
        );
      default:
        return;
    }
  };

  constructor(
    private readonly logger: LoggerService | undefined,
    private readonly now: () => number = Date.now,
  ) {}

  /** A configuration error met while serving a request or at boot. */
  configurationError(where: string, error: IdempotencyError): void {
    this.write('error', `configuration:${where}:${error.message}`, `${error.code} in ${where}: ${error.message}`);
  }

  warn(cause: string, line: string): void {
    this.write('warn', cause, line);
  }

  private write(level: 'warn' | 'error', cause: string, line: string): void {
    if (!this.logger) return;
    const now = this.now();
    const seen = this.causes.get(cause);
    if (seen && seen.until > now) {
      seen.suppressed++;
      return;
    }
    if (!seen && this.causes.size >= MAX_CAUSES) this.causes.delete(this.causes.keys().next().value!);
    const suppressed = seen?.suppressed ?? 0;
    this.causes.delete(cause);
    this.causes.set(cause, { until: now + LOG_RATE_LIMIT_MS, suppressed: 0 });
    const text = suppressed > 0 ? `${line} (${suppressed} more like it in the last ${LOG_RATE_LIMIT_MS / 1000} s not logged)` : line;
    if (level === 'error') this.logger.error(text);
    else this.logger.warn(text);
  }
}

function causeOf(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return `${error.name}:${typeof code === 'string' || typeof code === 'number' ? String(code) : ''}:${error.message.slice(0, 200)}`;
  }
  return String(error).slice(0, 200);
}
