import * as nestCommon from '@nestjs/common';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  IdempotencyStoreUnavailableError,
} from '../../core/errors.js';
import { PROBLEM_CONTENT_TYPE, problemOf, type IdempotencyProblem as ProblemBody } from '../problem.js';

/** The name of the problem body's schema in the document's `components.schemas`. */
export const PROBLEM_SCHEMA_NAME = 'IdempotencyProblem';

const text = (description: string, example: string) => ({ required: true, type: () => String, description, example });

/**
 * The problem body every refusal of `@Idempotent()` answers with (`problemOf`, RFC 9457),
 * as a schema @nestjs/swagger adds to `components.schemas`. Described the way its CLI
 * plugin describes a class (a static `_OPENAPI_METADATA_FACTORY`), the one form of model
 * metadata that compiled applications of every @nestjs/swagger version rely on, so the
 * library never imports @nestjs/swagger to declare it.
 */
export class IdempotencyProblem {
  static _OPENAPI_METADATA_FACTORY(): Record<string, object> {
    return {
      type: text('`urn:nestjs-idempotency:error:` and the code.', 'urn:nestjs-idempotency:error:IDEMPOTENCY_KEY_MISSING'),
      title: text('A short summary of the problem, the same for every occurrence.', 'Idempotency key missing'),
      status: { required: true, type: 'integer', description: 'The HTTP status of the answer.', example: 400 },
      detail: text(
        'What happened to this request.',
        'This operation requires an idempotency key, and none was found in the Idempotency-Key header.',
      ),
      code: text('A stable machine-readable code: match on it, not on the text.', 'IDEMPOTENCY_KEY_MISSING'),
      hint: text(
        'How to fix it.',
        'Send a unique key (for example a UUID) in the Idempotency-Key header, and reuse it only when retrying the same request.',
      ),
    };
  }
}

/**
 * The Content-Type of the problem bodies, as `toProblemHttpException` sends them: NestJS
 * 11's Express adapter rewrites an error Content-Type that does not start with
 * `application/json`, so there they go out as `application/json`; NestJS 12 (which added
 * `StandardSchemaValidationPipe`) and Fastify keep `application/problem+json`. `platform`
 * is unknown when the module is compiled before its HTTP adapter is chosen
 * (`Test.createTestingModule().compile()`): then on NestJS 11 both are listed.
 */
export function problemMediaTypes(platform: string | undefined): readonly string[] {
  if ('StandardSchemaValidationPipe' in nestCommon || platform === 'fastify') return [PROBLEM_CONTENT_TYPE];
  if (platform === 'express') return ['application/json'];
  return [PROBLEM_CONTENT_TYPE, 'application/json'];
}

/**
 * The bodies the library answers with, one example per status of a route's document
 * (its description names the other codes of that status): a page of examples per route
 * would make a large API's document several times larger.
 */
export const problemExamples = {
  /** A required key is missing; a malformed one when the key is optional. */
  badRequest: (keySource: string, required: boolean): ProblemBody =>
    problemOf(required ? new IdempotencyKeyMissingError(keySource) : new IdempotencyKeyInvalidError('it is longer than 255 characters')),
  conflict: (): ProblemBody => problemOf(new IdempotencyInFlightError(1000)),
  mismatch: (): ProblemBody => problemOf(new IdempotencyFingerprintMismatchError()),
  unavailable: (): ProblemBody => problemOf(new IdempotencyStoreUnavailableError(new Error('connection refused'))),
};
