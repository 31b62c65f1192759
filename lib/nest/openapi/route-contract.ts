import { MAX_KEY_LENGTH } from '../../core/key.js';
import { REPLAYED_HEADER } from '../idempotency.constants.js';
import type { ResolvedHandlerConfig } from '../transport.adapter.js';
import { describeHeaderKeySource } from '../transports/transport.js';
import type { IdempotencyProblem } from '../problem.js';
import { PROBLEM_SCHEMA_NAME, problemExamples } from './problem-schema.js';
import type { SwaggerParameter, SwaggerResponse } from './swagger-metadata.js';

/** The `x-idempotent` extension of an operation, for SDK generators. */
export interface IdempotentExtension {
  /** The request header the key is read from; null when the route's `key` option derives it from the request. */
  readonly header: string | null;
  /** Whether a request without a key is refused with 400 (false: it runs without idempotency). */
  readonly required: boolean;
  /** How long a completed answer is kept and replayed, ms. */
  readonly ttl: number;
}

/** What one `@Idempotent()` route adds to its operation in the document. */
export interface RouteContract {
  /** The key's header parameter; undefined when the `key` option reads the key elsewhere. */
  readonly parameter?: SwaggerParameter;
  /** The header names that carry the key (the `header` option and its usual alias), lower-case. */
  readonly keyHeaders: readonly string[];
  /** The refusals, by status. */
  readonly refusals: Readonly<Record<string, SwaggerResponse>>;
  /** `Idempotent-Replayed`, added to every success response. */
  readonly replayedHeader: Readonly<Record<string, object>>;
  readonly extension: IdempotentExtension;
}

/**
 * The contract of one route as it behaves: its effective header (the decorator's, else
 * the module's, else `Idempotency-Key`), `required`, `ttl`, and the refusals its options
 * make possible (422 only when a fingerprint is checked, 503 only under fail-closed).
 * `mediaTypes` are the Content-Types the problem bodies go out with.
 */
export function routeContractOf(config: ResolvedHandlerConfig, mediaTypes: readonly string[]): RouteContract {
  const { options, required } = config;
  const ttl = config.policy.ttl;
  const header = options.key ? null : (options.header ?? 'Idempotency-Key');
  const keySource = describeHeaderKeySource(options);
  const problem = (description: string, example: IdempotencyProblem, headers?: Record<string, object>): SwaggerResponse => ({
    description,
    ...(headers ? { headers } : {}),
    content: Object.fromEntries(
      mediaTypes.map((type) => [type, { schema: { $ref: `#/components/schemas/${PROBLEM_SCHEMA_NAME}` }, example }]),
    ),
  });
  const refusals: Record<string, SwaggerResponse> = {
    400: problem(
      (required ? `IDEMPOTENCY_KEY_MISSING: no idempotency key in ${keySource}. ` : '') +
        'IDEMPOTENCY_KEY_INVALID: the key is malformed (empty, longer than 255 characters, control characters, more than one value). ' +
        'IDEMPOTENCY_REQUEST_INVALID: the request cannot be fingerprinted (nested too deep).',
      problemExamples.badRequest(keySource, required),
    ),
    409: problem(
      'IDEMPOTENCY_REQUEST_IN_FLIGHT: a request with this key is still running; retry with the same key after Retry-After seconds to receive its answer. ' +
        'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE: the first request completed, but its answer could not be stored for replay; it will not run again with this key.',
      problemExamples.conflict(),
      {
        'Retry-After': {
          description: 'Seconds to wait before retrying with the same key (IDEMPOTENCY_REQUEST_IN_FLIGHT).',
          schema: { type: 'integer', minimum: 1 },
        },
      },
    ),
  };
  if (options.fingerprint !== false) {
    refusals[422] = problem(
      'IDEMPOTENCY_FINGERPRINT_MISMATCH: this key was already used with a different request (method, route parameters, query or body).',
      problemExamples.mismatch(),
    );
  }
  if (config.policy.onStoreError === 'fail-closed') {
    refusals[503] = problem(
      'IDEMPOTENCY_STORE_UNAVAILABLE: the idempotency store is unavailable; retry later with the same key.',
      problemExamples.unavailable(),
    );
  }
  return {
    parameter: header === null ? undefined : headerParameter(header, required, ttl, options.fingerprint !== false),
    keyHeaders: config.keyHeaders,
    refusals,
    replayedHeader: {
      [REPLAYED_HEADER]: {
        description: 'Set to true on an answer replayed for a retry with the same key: the request did not run again.',
        schema: { type: 'string', enum: ['true'] },
      },
    },
    extension: { header, required, ttl },
  };
}

function headerParameter(header: string, required: boolean, ttl: number, fingerprinted: boolean): SwaggerParameter {
  const retention =
    `A retry with the same key within ${describeDuration(ttl)} of the first answer gets that answer again (marked ${REPLAYED_HEADER}: true) instead of running again` +
    (fingerprinted ? '; the same key with a different request is refused with 422.' : '.');
  return {
    name: header,
    in: 'header',
    required,
    description: required
      ? `A unique key for this operation (for example a UUID), sent again unchanged when retrying it. ${retention}`
      : `Optional: a unique key for this operation (for example a UUID), sent again unchanged when retrying it; without one the request runs without idempotency. ${retention}`,
    schema: { type: 'string', maxLength: MAX_KEY_LENGTH },
  };
}

/** `24 h`, `90 s`, `7 days`: a retention as a client reads it. */
export function describeDuration(ms: number): string {
  const units: Array<[number, string]> = [
    [86_400_000, ' days'],
    [3_600_000, ' h'],
    [60_000, ' min'],
    [1000, ' s'],
  ];
  for (const [size, unit] of units) {
    if (ms % size !== 0) continue;
    const count = ms / size;
    if (unit === ' days' && count < 2) continue;
    return `${count}${unit}`;
  }
  return `${ms} ms`;
}
