import { Logger, type LoggerService, type LogLevel } from '@nestjs/common';
import type { IdempotencyEvent, IdempotencyEventListener, IdempotencyEventType } from '../core/events.js';

/**
 * The level each event is logged at. Routine events are `debug` (hidden by Nest's
 * default log levels), events a client caused are `log` or `warn`, and events that
 * mean lost protection or a sick store are `error`.
 */
export const DEFAULT_IDEMPOTENCY_LOG_LEVELS: Readonly<Record<IdempotencyEventType, LogLevel | false>> = {
  claimed: 'debug',
  completed: 'debug',
  replayed: 'log',
  in_flight_conflict: 'warn',
  fingerprint_mismatch: 'warn',
  released: 'log',
  error_cached: 'log',
  lease_lost: 'error',
  abandoned: 'warn',
  response_not_storable: 'warn',
  store_error: 'error',
  evicted_before_expiry: 'warn',
  step_completed: 'debug',
  step_replayed: 'debug',
  outbox_sent: 'debug',
  outbox_send_failed: 'warn',
  // A sample every outbox.backlogInterval, for the metrics: a line each time would be noise.
  outbox_backlog: false,
};

export interface IdempotencyLoggerOptions {
  /**
   * Where lines go: any Nest `LoggerService` (your app logger, pino, winston adapters).
   * @default new Logger('Idempotency')
   */
  logger?: LoggerService;
  /**
   * Level per event type, merged over the defaults; `false` silences an event.
   * @default DEFAULT_IDEMPOTENCY_LOG_LEVELS
   */
  levels?: Partial<Record<IdempotencyEventType, LogLevel | false>>;
}

/**
 * An `onEvent` listener that writes every idempotency event to a Nest logger, one line
 * per event, with the hashed key (never the raw client key), the handler and timings:
 *
 * `replayed PaymentsController.charge key=3q2-7w... in 2 ms (store 1 ms)`
 */
export function createIdempotencyLogger(options: IdempotencyLoggerOptions = {}): IdempotencyEventListener {
  const logger = options.logger ?? new Logger('Idempotency');
  const levels = { ...DEFAULT_IDEMPOTENCY_LOG_LEVELS, ...options.levels };
  return (event) => {
    const level = levels[event.type];
    if (!level) return;
    const line = formatIdempotencyEvent(event);
    const stack = event.error instanceof Error ? event.error.stack : undefined;
    switch (level) {
      case 'error':
        if (stack) logger.error(line, stack);
        else logger.error(line);
        break;
      case 'fatal':
        // `fatal` is optional on LoggerService; fall back to error.
        (logger.fatal ?? logger.error).call(logger, line);
        break;
      case 'warn':
        logger.warn(line);
        break;
      case 'debug':
        logger.debug?.(line);
        break;
      case 'verbose':
        logger.verbose?.(line);
        break;
      default:
        logger.log(line);
    }
  };
}

/** The one-line text of an event, as `createIdempotencyLogger` writes it. */
export function formatIdempotencyEvent(event: IdempotencyEvent): string {
  let line = `${event.type} ${event.handler ?? '-'} key=${event.key}${event.step === undefined ? '' : ` step=${event.step}`} in ${event.durationMs} ms`;
  if (event.storeLatencyMs !== undefined) line += ` (store ${event.storeLatencyMs} ms)`;
  if (event.failOpen !== undefined) line += event.failOpen ? ' fail-open: the handler ran unprotected' : ' fail-closed';
  if (event.reason) line += `: ${event.reason}`;
  if (event.error !== undefined) line += `: ${describeError(event.error)}`;
  return line;
}

/** @internal An error as one line (`Name: message`), whatever was thrown. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  try {
    return String(error);
  } catch {
    return 'unprintable error';
  }
}
