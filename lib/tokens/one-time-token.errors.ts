import { IdempotencyError, IdempotencyErrorCode } from '../core/errors.js';

/** The request carries no one-time token (HTTP 400). */
export class OneTimeTokenMissingError extends IdempotencyError {
  constructor(source: string) {
    super(
      IdempotencyErrorCode.TokenMissing,
      400,
      `This operation requires a one-time token, and none was found in ${source}.`,
      `Request a token first (for example by loading the form), then send it in ${source}.`,
      { title: 'One-time token missing' },
    );
  }
}

/** The token was valid but has been used already: a double submission (HTTP 409). */
export class OneTimeTokenUsedError extends IdempotencyError {
  constructor() {
    super(
      IdempotencyErrorCode.TokenUsed,
      409,
      'This one-time token has already been used: the operation was submitted before.',
      'Do not submit again; check the result of the first submission. To do it once more, request a new token.',
      { title: 'One-time token already used' },
    );
  }
}

/** The token is unknown: never issued, expired, revoked, or issued for another scope (HTTP 422). */
export class OneTimeTokenInvalidError extends IdempotencyError {
  constructor() {
    super(
      IdempotencyErrorCode.TokenInvalid,
      422,
      'This one-time token is not valid: it has expired, was never issued, or was issued for another operation.',
      'Request a new token (for example by reloading the form) and submit again.',
      { title: 'One-time token invalid' },
    );
  }
}
