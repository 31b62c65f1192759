import { IdempotencyError, IdempotencyErrorCode } from '../core/errors.js';

/** Another holder kept the lock for the whole `waitTimeout` (HTTP 409). */
export class LockNotAcquiredError extends IdempotencyError {
  constructor(
    readonly resource: string,
    readonly waitTimeout: number,
  ) {
    super(
      IdempotencyErrorCode.LockNotAcquired,
      409,
      `The lock on "${resource}" could not be acquired within ${waitTimeout} ms: another holder has it.`,
      'Retry later. If the holder legitimately needs longer, raise waitTimeout; if holders crash, lower ttl so their locks lapse sooner.',
      { title: 'Lock not acquired' },
    );
  }
}

/**
 * The lock lapsed while its work was running (renewal failed or came too late), so
 * another holder may be running the same work. The `signal` given to the work of
 * `withLock()` is aborted with this error.
 */
export class LockLostError extends IdempotencyError {
  constructor(readonly resource: string) {
    super(
      IdempotencyErrorCode.LockLost,
      409,
      `The lock on "${resource}" was lost before the work finished.`,
      'Check signal.aborted before each write that needs the lock; raise ttl if the work pauses longer than a third of it (GC, event-loop stalls).',
      { title: 'Lock lost' },
    );
  }
}
