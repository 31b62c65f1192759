import { IdempotencyConfigurationError } from '../core/errors.js';
import { callKey } from './call-key.js';
import {
  delayBefore,
  resolveRetryPolicy,
  type IdempotentRetryOptions,
  type RetryPolicy,
  type RetryReason,
  waitUnlessAborted,
} from './retry-policy.js';

/** `fetch`'s own signature, which `createIdempotentFetch` takes and returns. */
export type FetchFunction = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** Options of `createIdempotentFetch`. */
export interface IdempotentFetchOptions extends IdempotentRetryOptions {
  /**
   * The fetch that sends each attempt (undici's, one with a dispatcher, a test double).
   * @default globalThis.fetch
   */
  fetch?: FetchFunction;
}

/**
 * A `fetch` that gives each logical call one idempotency key and retries it safely: the
 * key is made before the first attempt (or taken from the caller's headers) and sent
 * unchanged on every retry, so a server that honours it runs the request once however
 * many attempts reach it. Network errors, per-attempt timeouts and the statuses of
 * `retryOn` are retried with backoff (or after the server's `Retry-After`); every other
 * answer is returned at once, and after the last attempt its answer (or error) is the
 * call's, as with `fetch`. Methods outside `methods` are sent once, untouched.
 *
 * Inside a `step()` the key is the step's (`stepKey`), and elsewhere inside an
 * idempotent execution it is derived from the execution and the call's order, so a
 * handler run again after a crash sends the same keys as before (see docs/client.md).
 *
 * @example
 * const idempotentFetch = createIdempotentFetch({ maxAttempts: 5 });
 * const res = await idempotentFetch('https://payments.internal/charges', {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json' },
 *   body: JSON.stringify({ amount: 700 }),
 * });
 */
export function createIdempotentFetch(options: IdempotentFetchOptions = {}): FetchFunction {
  const policy = resolveRetryPolicy('createIdempotentFetch', options);
  const send = options.fetch ?? globalThis.fetch;
  if (typeof send !== 'function') {
    throw new IdempotencyConfigurationError(
      'createIdempotentFetch: no fetch to send with (globalThis.fetch is missing and no fetch option was given).',
      'Pass one: createIdempotentFetch({ fetch: undici.fetch }), or run on Node.js 18 or later.',
    );
  }
  return (input, init) => idempotentCall(policy, send, input, init);
}

async function idempotentCall(
  policy: RetryPolicy,
  send: FetchFunction,
  input: string | URL | Request,
  init?: RequestInit,
): Promise<Response> {
  // Read before anything touches the input: a Request's body can be used once, and a
  // call this client does not handle must reach fetch as the caller made it.
  if (!policy.methods.has(methodOf(input, init))) return send(input, init);
  const template = new Request(input, init);
  const retried = policy.maxAttempts > 1;
  if (retried && isStream(init?.body)) {
    throw new IdempotencyConfigurationError(
      `createIdempotentFetch: ${template.method} ${template.url} has a ReadableStream body, which cannot be sent again on a retry.`,
      'Pass the body as a string, bytes, a Blob, URLSearchParams or FormData (each is re-sent identically), or create a client with maxAttempts: 1 for streams.',
    );
  }
  const headers = new Headers(template.headers);
  const key = headers.get(policy.header) ?? callKey();
  headers.set(policy.header, key);
  const body = template.body === null ? null : await template.clone().arrayBuffer();
  const callerSignal = init?.signal ?? (input instanceof Request ? input.signal : undefined) ?? undefined;

  for (let attempt = 1; ; attempt++) {
    callerSignal?.throwIfAborted();
    // Not AbortSignal.timeout(): it cannot be cleared, and would abort the body of the
    // answer returned while the caller reads it (see `timeout`).
    const timeout = policy.timeout === undefined ? undefined : new AbortController();
    const timer = timeout && setTimeout(() => timeout.abort(timedOut()), policy.timeout);
    const signal = timeout && callerSignal ? AbortSignal.any([callerSignal, timeout.signal]) : (timeout?.signal ?? callerSignal);
    let reason: RetryReason;
    let response: Response | undefined;
    let error: unknown;
    try {
      try {
        response = await send(new Request(template, { headers, body, signal }));
      } finally {
        clearTimeout(timer);
      }
      if (attempt === policy.maxAttempts || !policy.retries({ attempt, reason: 'status', status: response.status })) return response;
      reason = 'status';
    } catch (thrown) {
      if (callerSignal?.aborted) throw callerSignal.reason;
      error = thrown;
      reason = timeout?.signal.aborted ? 'timeout' : 'network';
      if (attempt === policy.maxAttempts || !policy.retries({ attempt, reason, error })) throw thrown;
    }
    const delayMs = delayBefore(policy, attempt, response?.headers.get('retry-after') ?? null);
    if (delayMs === undefined) return response!;
    // The attempt's body is not read: cancel it, so its connection is freed.
    await response?.body?.cancel().catch(() => undefined);
    policy.onRetry?.({ attempt, key, reason, status: response?.status, error, delayMs });
    await waitUnlessAborted(delayMs, callerSignal);
  }
}

/** The call's method as fetch sends it, upper-cased for the comparison with `methods`. */
function methodOf(input: string | URL | Request, init: RequestInit | undefined): string {
  const method = init?.method ?? (typeof input === 'object' && !(input instanceof URL) ? input.method : undefined) ?? 'GET';
  return method.toUpperCase();
}

/** What `AbortSignal.timeout()` aborts with. */
function timedOut(): DOMException {
  return new DOMException('The operation was aborted due to timeout', 'TimeoutError');
}

function isStream(body: unknown): boolean {
  return typeof ReadableStream !== 'undefined' && body instanceof ReadableStream;
}
