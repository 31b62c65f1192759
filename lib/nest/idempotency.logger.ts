import type { LoggerService } from '@nestjs/common';
import { IdempotencyErrorCode, isIdempotencyError, type IdempotencyError, type IdempotencyEventListener } from '../core/index.js';
import { listeningTo } from '../core/listened-types.js';
import { formatIdempotencyEvent } from '../observability/logger.js';
import { LOG_WINDOW_MS, RateLimitedLog } from '../observability/rate-limited-log.js';

/**
 * What the module logs by default, through Nest's `Logger` (context `Idempotency`):
 * what the library refused or lost, never routine traffic. Store errors and outages,
 * fail-open runs, lost leases and memory evictions are `warn`; configuration errors
 * are `error`. Keys appear hashed. Each cause is logged at most once per 10 s, and the
 * next line says how many were suppressed.
 */
export class IdempotencyLog {
  /** Feeds the events worth a line to the logger; every other event returns at once. */
  readonly listener: IdempotencyEventListener = listeningTo(
    (event) => {
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
    },
    ['store_error', 'lease_lost', 'evicted_before_expiry'],
  );

  private readonly log: RateLimitedLog | undefined;

  constructor(logger: LoggerService | undefined, now: () => number = Date.now) {
    this.log = logger ? new RateLimitedLog(logger, LOG_WINDOW_MS, now) : undefined;
  }

  /** A configuration error met while serving a request or at boot. */
  configurationError(where: string, error: IdempotencyError): void {
    this.log?.error(`configuration:${where}:${error.message}`, `${error.code} in ${where}: ${error.message}`);
  }

  warn(cause: string, line: string): void {
    this.log?.warn(cause, line);
  }
}

function causeOf(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return `${error.name}:${typeof code === 'string' || typeof code === 'number' ? String(code) : ''}:${error.message.slice(0, 200)}`;
  }
  return String(error).slice(0, 200);
}
