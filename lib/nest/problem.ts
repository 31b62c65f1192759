import type { IdempotencyError } from '../core/index.js';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** An RFC 9457 problem body for one of this library's errors. */
export interface IdempotencyProblem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** Stable machine-readable code, e.g. `IDEMPOTENCY_KEY_MISSING`. */
  readonly code: string;
  /** How to fix it. */
  readonly hint: string;
}

const TITLES: Record<string, string> = {
  IDEMPOTENCY_KEY_MISSING: 'Idempotency key missing',
  IDEMPOTENCY_KEY_INVALID: 'Idempotency key invalid',
  IDEMPOTENCY_FINGERPRINT_MISMATCH: 'Idempotency key reused with a different request',
  IDEMPOTENCY_REQUEST_IN_FLIGHT: 'Request with this idempotency key in progress',
  IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE: 'Response not replayable',
  IDEMPOTENCY_STORE_UNAVAILABLE: 'Idempotency store unavailable',
  IDEMPOTENCY_CONFIGURATION_ERROR: 'Idempotency misconfigured',
  IDEMPOTENCY_REQUEST_INVALID: 'Request cannot be processed idempotently',
  IDEMPOTENCY_TOKEN_MISSING: 'One-time token missing',
  IDEMPOTENCY_TOKEN_USED: 'One-time token already used',
  IDEMPOTENCY_TOKEN_INVALID: 'One-time token invalid',
  IDEMPOTENCY_LOCK_NOT_ACQUIRED: 'Lock not acquired',
  IDEMPOTENCY_LOCK_LOST: 'Lock lost',
  IDEMPOTENCY_OPTIMISTIC_LOCK: 'Concurrent update',
  IDEMPOTENCY_ILLEGAL_TRANSITION: 'Illegal state transition',
};

/**
 * What a client may read of an error. A store error's message carries its cause (host
 * names, ports, driver messages): that belongs in the server log, not in a response.
 */
function publicDetailOf(error: IdempotencyError): string {
  return error.code === 'IDEMPOTENCY_STORE_UNAVAILABLE' ? 'The idempotency store is unavailable.' : error.message;
}

export function problemOf(error: IdempotencyError): IdempotencyProblem {
  return {
    type: `urn:nestjs-idempotency:error:${error.code}`,
    title: TITLES[error.code] ?? error.name,
    status: error.status,
    detail: publicDetailOf(error),
    code: error.code,
    hint: error.hint,
  };
}
