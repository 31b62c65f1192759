import * as nestCommon from '@nestjs/common';
import { HttpException } from '@nestjs/common';
import type { IdempotencyError, IdempotencyInFlightError } from '../core/index.js';

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

/** The parts of an Express response or a Fastify reply that problem rendering and replay use. */
export interface HttpResponseLike {
  statusCode: number;
  headersSent?: boolean;
  sent?: boolean;
  raw?: { headersSent?: boolean };
  status(code: number): unknown;
  getHeaders(): Record<string, number | string | string[] | undefined>;
  setHeader?(name: string, value: string | string[]): unknown;
  header?(name: string, value: string | string[]): unknown;
}

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
    // An error of an older copy of this package in the same process has no title of its own.
    title: (error as Partial<IdempotencyError>).title ?? error.name,
    status: error.status,
    detail: publicDetailOf(error),
    code: error.code,
    hint: error.hint,
  };
}

/**
 * NestJS 11's Express adapter rewrites any error Content-Type not starting with
 * `application/json` (and logs a warning each time), so there the problem body goes out
 * as `application/json`. NestJS 12 (which added Standard Schema support) keeps `+json`.
 */
const EXPRESS_KEEPS_PROBLEM_JSON = 'StandardSchemaValidationPipe' in nestCommon;

/**
 * The HttpException that answers one of this library's errors as a problem body, with
 * its headers (Content-Type where the platform keeps it, Retry-After when in flight) set
 * on the response. The one renderer of HTTP problems: `@Idempotent()` and
 * `@RequireOneTimeToken()` answer alike.
 */
export function toProblemHttpException(response: HttpResponseLike, error: IdempotencyError): HttpException {
  if (EXPRESS_KEEPS_PROBLEM_JSON || isFastifyReply(response)) setHeader(response, 'Content-Type', PROBLEM_CONTENT_TYPE);
  const retryAfterMs = (error as Partial<IdempotencyInFlightError>).retryAfterMs;
  if (retryAfterMs) setHeader(response, 'Retry-After', String(Math.max(1, Math.ceil(retryAfterMs / 1000))));
  return new HttpException(problemOf(error), error.status, { cause: error });
}

export function isFastifyReply(response: HttpResponseLike): boolean {
  return typeof response.header === 'function' && response.raw !== undefined;
}

export function setHeader(response: HttpResponseLike, name: string, value: string | string[]): void {
  if (isFastifyReply(response)) response.header!(name, value);
  else response.setHeader?.(name, value);
}
