import { Logger } from '@nestjs/common';
import type { IdempotencyEvent } from '../core/events.js';
import type { StoreEventListeners } from '../core/store-events.js';
import { RateLimitedLog } from '../observability/rate-limited-log.js';
import type { LoggerService } from '@nestjs/common';

/** What one purge of expired records did. */
export interface PurgeResult {
  /** False when another instance (or call) was purging, so this one did nothing. */
  readonly ran: boolean;
  /** Rows deleted. */
  readonly deleted: number;
}

/** The purge callbacks a SQL store's options carry (documented on each store's options). */
export interface PurgeReporting {
  onPurge?: (result: PurgeResult) => void;
  onPurgeError?: (error: unknown) => void;
  logger?: LoggerService;
}

/**
 * The store's background purge (`purgeInterval`): a timer that does not keep the process
 * alive, started once the store is known to work, never two runs at once; a failed run
 * goes to the store's event listeners and to `onPurgeError` (or, when nobody else reports
 * it, to a rate-limited warning).
 */
export class PurgeSchedule {
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private scheduledRun: Promise<void> | undefined;
  private log: RateLimitedLog | undefined;

  constructor(
    private readonly interval: number,
    private readonly purge: () => Promise<PurgeResult>,
    private readonly options: PurgeReporting,
    private readonly listeners: StoreEventListeners,
    /** The quoted table, once known (for the failure's reason). */
    private readonly tableName: () => string | undefined,
    /** The store's class name, in the warning. */
    private readonly owner = 'TypeOrmIdempotencyStore',
  ) {}

  /** Starts the timer, unless it runs already or the schedule was stopped. */
  start(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => {
      if (!this.scheduledRun) this.scheduledRun = this.run().finally(() => (this.scheduledRun = undefined));
    }, this.interval);
    this.timer.unref();
  }

  /** Stops the timer for good and waits for a run in progress. */
  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.scheduledRun;
  }

  private async run(): Promise<void> {
    const startedAt = Date.now();
    let result: PurgeResult;
    try {
      result = await this.purge();
    } catch (error) {
      this.reportFailure(error, startedAt);
      return;
    }
    try {
      this.options.onPurge?.(result);
    } catch {
      // A throwing callback must not turn into an unhandled rejection of the timer's run.
    }
  }

  private reportFailure(error: unknown, startedAt: number): void {
    const event: IdempotencyEvent = {
      type: 'store_error',
      key: '',
      at: Date.now(),
      durationMs: Date.now() - startedAt,
      error,
      reason: `the background purge of expired records in ${this.tableName() ?? 'the records table'} failed; it runs again in ${this.interval} ms`,
    };
    this.listeners.emit(event);
    if (this.options.onPurgeError) {
      try {
        this.options.onPurgeError(error);
      } catch {
        // Same as onPurge: the timer has nobody to hand this to.
      }
      return;
    }
    // The module's listeners log store events themselves (and obey its logger option):
    // writing here too would print every failure twice.
    if (this.listeners.size > 0) return;
    this.log ??= new RateLimitedLog(this.options.logger ?? new Logger('Idempotency'));
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    this.log.warn(message, `${this.owner}: ${event.reason}: ${message}`);
  }
}
