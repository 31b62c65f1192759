import { IdempotencyConfigurationError } from '../core/errors.js';
import { checkWholeNumber, shown } from '../core/options.js';

/** Why an attempt is retried: no answer (`network`), no answer in time (`timeout`), or its `status`. */
export type RetryReason = 'network' | 'timeout' | 'status';

/** What `onRetry` hears before each wait: the attempt that failed, why, and how long the client waits. */
export interface RetryInfo {
  /** The attempt that failed, 1 for the first. */
  readonly attempt: number;
  /** The idempotency key, the same on every attempt of the call. */
  readonly key: string;
  readonly reason: RetryReason;
  /** The answer's status, when `reason` is `'status'`. */
  readonly status?: number;
  /** What the attempt threw, when `reason` is `'network'` or `'timeout'`. */
  readonly error?: unknown;
  /** The wait before the next attempt, ms: the server's `Retry-After`, else the backoff. */
  readonly delayMs: number;
}

/** An attempt that did not answer with a final answer, as a `retryOn` function sees it. */
export interface RetryCandidate {
  readonly attempt: number;
  readonly reason: RetryReason;
  readonly status?: number;
  readonly error?: unknown;
}

/** Options of `createIdempotentFetch` and `applyIdempotentRetries`. */
export interface IdempotentRetryOptions {
  /**
   * The header that carries the key.
   * @default 'Idempotency-Key'
   */
  header?: string;
  /**
   * Methods that get a key and may be retried. Others are sent once, as without this
   * client, with no key.
   * @default ['POST', 'PATCH']
   */
  methods?: readonly string[];
  /**
   * Attempts in all, the first included. 1 sends the key but never retries.
   * @default 5
   */
  maxAttempts?: number;
  /**
   * The first backoff's upper bound, ms; each later one doubles, up to `maxDelay`, with
   * full jitter (a random wait between 0 and the bound).
   * @default 100
   */
  minDelay?: number;
  /**
   * The largest backoff of the client's own, ms. A server's `Retry-After` is honoured
   * above it, up to 60 s.
   * @default 10_000
   */
  maxDelay?: number;
  /**
   * What is retried: a list of statuses (network errors and per-attempt timeouts are then
   * retried too), or a function that decides for each failed attempt.
   * @default network errors, per-attempt timeouts, 408, 409, 425, 429, 500, 502, 503, 504
   */
  retryOn?: readonly number[] | ((candidate: RetryCandidate) => boolean);
  /**
   * Per-attempt timeout, ms: how long an attempt may wait for its answer (the response's
   * status and headers). A timed-out attempt is retried (the same key makes that safe).
   * Reading the body of the answer returned is not bounded by it (the answer arrived; a
   * cut-off read could not be retried); the caller's own `AbortSignal` still aborts the
   * whole call, body included.
   * @default none
   */
  timeout?: number;
  /** Called before each wait, for logs and metrics. @default none */
  onRetry?: (info: RetryInfo) => void;
}

/** The statuses retried by default: no final answer yet, or a server that may answer later. */
export const DEFAULT_RETRY_STATUSES: readonly number[] = Object.freeze([408, 409, 425, 429, 500, 502, 503, 504]);

/** The longest `Retry-After` honoured; a server asking for more gets its answer returned. */
export const MAX_RETRY_AFTER_MS = 60_000;

const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The options with their defaults, checked once when the client is made. */
export interface RetryPolicy {
  readonly header: string;
  readonly methods: ReadonlySet<string>;
  readonly maxAttempts: number;
  readonly minDelay: number;
  readonly maxDelay: number;
  readonly timeout: number | undefined;
  readonly retries: (candidate: RetryCandidate) => boolean;
  readonly onRetry: ((info: RetryInfo) => void) | undefined;
}

export function resolveRetryPolicy(owner: string, options: IdempotentRetryOptions = {}): RetryPolicy {
  const { header = 'Idempotency-Key', methods = ['POST', 'PATCH'], maxAttempts = 5, minDelay = 100, maxDelay = 10_000 } = options;
  if (typeof header !== 'string' || !HEADER_NAME.test(header)) {
    throw new IdempotencyConfigurationError(
      `${owner}: header must be an HTTP header name, got ${shown(header)}.`,
      `Write header: 'Idempotency-Key'.`,
    );
  }
  if (!Array.isArray(methods) || methods.some((method) => typeof method !== 'string' || !HEADER_NAME.test(method))) {
    throw new IdempotencyConfigurationError(
      `${owner}: methods must be a list of HTTP methods, got ${shown(methods)}.`,
      `Write methods: ['POST', 'PATCH'].`,
    );
  }
  checkWholeNumber(owner, 'maxAttempts', maxAttempts, { example: '5' });
  checkWholeNumber(owner, 'minDelay', minDelay, { min: 0, unit: 'ms', example: '100' });
  checkWholeNumber(owner, 'maxDelay', maxDelay, { min: 0, unit: 'ms', example: '10_000' });
  checkWholeNumber(owner, 'timeout', options.timeout, { unit: 'ms', example: '5_000' });
  if (maxDelay < minDelay) {
    throw new IdempotencyConfigurationError(
      `${owner}: maxDelay (${maxDelay} ms) is below minDelay (${minDelay} ms).`,
      'Give maxDelay at least minDelay.',
    );
  }
  if (options.onRetry !== undefined && typeof options.onRetry !== 'function') {
    throw new IdempotencyConfigurationError(
      `${owner}: onRetry must be a function, got ${shown(options.onRetry)}.`,
      'Write onRetry: (info) => logger.warn(info).',
    );
  }
  return {
    header,
    methods: new Set(methods.map((method) => method.toUpperCase())),
    maxAttempts,
    minDelay,
    maxDelay,
    timeout: options.timeout,
    retries: retryDecision(owner, options.retryOn),
    onRetry: options.onRetry,
  };
}

function retryDecision(owner: string, retryOn: IdempotentRetryOptions['retryOn']): (candidate: RetryCandidate) => boolean {
  if (typeof retryOn === 'function') return retryOn;
  const statuses = retryOn ?? DEFAULT_RETRY_STATUSES;
  if (!Array.isArray(statuses) || statuses.some((status) => !Number.isInteger(status) || status < 100 || status > 599)) {
    throw new IdempotencyConfigurationError(
      `${owner}: retryOn must be a list of HTTP statuses or a function, got ${shown(retryOn)}.`,
      'Write retryOn: [503, 504], or retryOn: ({ reason, status }) => ...',
    );
  }
  const retried = new Set(statuses);
  return (candidate) => candidate.reason !== 'status' || retried.has(candidate.status!);
}

/**
 * The wait before attempt `attempt + 1`: the server's `Retry-After` when it gave one
 * (`undefined` when it asks for more than 60 s: the answer is then returned), else
 * exponential backoff with full jitter.
 */
export function delayBefore(policy: RetryPolicy, attempt: number, retryAfter: string | null, now = Date.now()): number | undefined {
  const asked = retryAfter === null ? undefined : retryAfterMs(retryAfter, now);
  if (asked !== undefined) return asked > MAX_RETRY_AFTER_MS ? undefined : asked;
  const bound = Math.min(policy.maxDelay, policy.minDelay * 2 ** (attempt - 1));
  return Math.floor(Math.random() * (bound + 1));
}

/** RFC 9110's three forms of an HTTP date: IMF-fixdate, the obsolete RFC 850 form, asctime (GMT without saying so). */
const HTTP_DATE = [
  /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/,
  /^[A-Za-z]{6,9}, \d{2}-[A-Za-z]{3}-\d{2} \d{2}:\d{2}:\d{2} GMT$/,
  /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/,
];

/**
 * `Retry-After` as ms from `now`: delay-seconds or an HTTP date; `undefined` when it is
 * neither. Checked against the grammar first: `Date.parse` reads almost anything as a
 * date (`-5`, `1.5`, `1, 2` are years past), which would turn a garbled header into a
 * retry at once instead of the client's own backoff.
 */
export function retryAfterMs(value: string, now = Date.now()): number | undefined {
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const form = HTTP_DATE.findIndex((pattern) => pattern.test(text));
  if (form === -1) return undefined;
  const at = Date.parse(form === 2 ? `${text} GMT` : text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Waits `ms`, or rejects with the signal's reason as soon as the caller aborts. */
export function waitUnlessAborted(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
