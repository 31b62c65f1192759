import { IdempotencyError, IdempotencyErrorCode } from './errors.js';

/**
 * The execution's lease was taken over by another worker (this one was paused or too
 * slow, and its lease ran out): a `step()` of this worker neither runs nor records, so a
 * zombie stops at its next step instead of repeating what the new owner does (HTTP 409).
 */
export class IdempotencyLeaseLostError extends IdempotencyError {
  /** The step that was refused. */
  readonly step: string;

  constructor(step: string) {
    super(
      IdempotencyErrorCode.LeaseLost,
      409,
      `The idempotency lease of this execution was taken over by another worker: step '${step}' was not recorded.`,
      'Stop this attempt: the worker that owns the key now runs the missing steps. Raise leaseTtl above the longest step if this happens without a pause or crash.',
      { title: 'Idempotency lease lost' },
    );
    this.step = step;
  }
}
