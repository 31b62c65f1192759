/**
 * Stable codes, one per failure. Clients and log queries can match on them; they never
 * change between versions.
 */
export const IdempotencyErrorCode = {
  KeyMissing: 'IDEMPOTENCY_KEY_MISSING',
  KeyInvalid: 'IDEMPOTENCY_KEY_INVALID',
  FingerprintMismatch: 'IDEMPOTENCY_FINGERPRINT_MISMATCH',
  InFlight: 'IDEMPOTENCY_REQUEST_IN_FLIGHT',
  NotReplayable: 'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE',
  StoreUnavailable: 'IDEMPOTENCY_STORE_UNAVAILABLE',
  Configuration: 'IDEMPOTENCY_CONFIGURATION_ERROR',
  RequestInvalid: 'IDEMPOTENCY_REQUEST_INVALID',
  TokenMissing: 'IDEMPOTENCY_TOKEN_MISSING',
  TokenUsed: 'IDEMPOTENCY_TOKEN_USED',
  TokenInvalid: 'IDEMPOTENCY_TOKEN_INVALID',
  LockNotAcquired: 'IDEMPOTENCY_LOCK_NOT_ACQUIRED',
  LockLost: 'IDEMPOTENCY_LOCK_LOST',
  LeaseLost: 'IDEMPOTENCY_LEASE_LOST',
  OptimisticLock: 'IDEMPOTENCY_OPTIMISTIC_LOCK',
  IllegalTransition: 'IDEMPOTENCY_ILLEGAL_TRANSITION',
} as const;
export type IdempotencyErrorCode = (typeof IdempotencyErrorCode)[keyof typeof IdempotencyErrorCode];

/** Base class: every error this library raises is one of these. */
export class IdempotencyError extends Error {
  /** HTTP status used when the error reaches an HTTP client. */
  readonly status: number;
  readonly code: IdempotencyErrorCode;
  /** What the caller can do about it. */
  readonly hint: string;
  /** A short, stable summary of the problem: the `title` of its problem body. */
  readonly title: string;

  constructor(code: IdempotencyErrorCode, status: number, message: string, hint: string, options?: { cause?: unknown; title?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.hint = hint;
    this.title = options?.title ?? new.target.name;
  }
}

/** A handler that requires a key received none (HTTP 400). */
export class IdempotencyKeyMissingError extends IdempotencyError {
  constructor(source: string) {
    super(
      IdempotencyErrorCode.KeyMissing,
      400,
      `This operation requires an idempotency key, and none was found in ${source}.`,
      `Send a unique key (for example a UUID) in ${source}, and reuse it only when retrying the same request.`,
      { title: 'Idempotency key missing' },
    );
  }
}

/** The client key is malformed, or the request carries more than one (HTTP 400). */
export class IdempotencyKeyInvalidError extends IdempotencyError {
  constructor(reason: string) {
    super(
      IdempotencyErrorCode.KeyInvalid,
      400,
      `The idempotency key is invalid: ${reason}.`,
      'Use 1 to 255 printable characters without control characters, for example a UUID.',
      { title: 'Idempotency key invalid' },
    );
  }
}

/** The key was already used with a different request (HTTP 422). */
export class IdempotencyFingerprintMismatchError extends IdempotencyError {
  constructor() {
    super(
      IdempotencyErrorCode.FingerprintMismatch,
      422,
      'This idempotency key was already used with a different request.',
      'Reuse a key only to retry the identical request; send a new key for a new request.',
      { title: 'Idempotency key reused with a different request' },
    );
  }
}

/** A request with this key is still running (HTTP 409 with `Retry-After`). */
export class IdempotencyInFlightError extends IdempotencyError {
  /** Suggested wait before retrying, in ms. */
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number) {
    super(
      IdempotencyErrorCode.InFlight,
      409,
      'A request with this idempotency key is still being processed.',
      `Retry after ${Math.ceil(retryAfterMs / 1000)} s with the same key to receive its result.`,
      { title: 'Request with this idempotency key in progress' },
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** The first request completed, but its response could not be stored for replay (HTTP 409). */
export class IdempotencyNotReplayableError extends IdempotencyError {
  constructor(reason: string) {
    super(
      IdempotencyErrorCode.NotReplayable,
      409,
      `A request with this idempotency key already completed, but its response could not be stored for replay (${reason}).`,
      'The operation ran once and will not run again with this key. Fetch the resource instead, or use a new key for a new operation.',
      { title: 'Response not replayable' },
    );
  }
}

/** The store failed or timed out under `onStoreError: 'fail-closed'` (HTTP 503). */
export class IdempotencyStoreUnavailableError extends IdempotencyError {
  constructor(cause: unknown) {
    super(
      IdempotencyErrorCode.StoreUnavailable,
      503,
      `The idempotency store is unavailable: ${describe(cause)}.`,
      'Retry later with the same key. Operators: check the store connection, or set onStoreError: "fail-open" to run unprotected during outages.',
      { cause, title: 'Idempotency store unavailable' },
    );
  }
}

/** A mistake in how the library is set up; the message itself says how to fix it, as it lands in developers' logs. */
export class IdempotencyConfigurationError extends IdempotencyError {
  constructor(message: string, hint: string, options?: { cause?: unknown }) {
    super(IdempotencyErrorCode.Configuration, 500, `${message} ${hint}`, hint, { ...options, title: 'Idempotency misconfigured' });
  }
}

/** The request itself cannot be fingerprinted (for example nested deeper than the limit). */
export class IdempotencyRequestInvalidError extends IdempotencyError {
  constructor(reason: string, hint = 'Send a smaller or flatter payload.') {
    super(IdempotencyErrorCode.RequestInvalid, 400, `The request cannot be processed idempotently: ${reason}.`, hint, {
      title: 'Request cannot be processed idempotently',
    });
  }
}

/** True for an error raised by this library, also across the ESM and CommonJS copies of the package. */
export function isIdempotencyError(value: unknown): value is IdempotencyError {
  // Checks the shape too, as two copies of this package (ESM and CJS) can meet in one process.
  return (
    value instanceof IdempotencyError ||
    (value instanceof Error &&
      typeof (value as Partial<IdempotencyError>).code === 'string' &&
      (value as IdempotencyError).code.startsWith('IDEMPOTENCY_') &&
      typeof (value as Partial<IdempotencyError>).status === 'number')
  );
}

function describe(cause: unknown): string {
  if (cause instanceof Error) return cause.message || cause.name;
  return String(cause);
}
