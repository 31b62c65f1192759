/**
 * The calling side: `fetch` (and axios) that give each logical call one idempotency key
 * and retry it safely. Dependency-free; axios is never loaded by this entry point.
 * @packageDocumentation
 */
export { createIdempotentFetch, type FetchFunction, type IdempotentFetchOptions } from './idempotent-fetch.js';
export { applyIdempotentRetries, type AxiosInstanceLike, type AxiosRequestConfigLike } from './axios-retries.js';
export {
  DEFAULT_RETRY_STATUSES,
  MAX_RETRY_AFTER_MS,
  type IdempotentRetryOptions,
  type RetryCandidate,
  type RetryInfo,
  type RetryReason,
} from './retry-policy.js';
