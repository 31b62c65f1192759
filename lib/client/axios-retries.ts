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

/*
 * The same policy as createIdempotentFetch, for an axios instance (`axios.create()`, or
 * `HttpService.axiosRef` of @nestjs/axios). Written against the shape of axios, not its
 * types, so that axios stays an optional peer this package never loads.
 */

/** What this function reads and writes of an axios request config. */
export interface AxiosRequestConfigLike {
  method?: string;
  url?: string;
  headers?: unknown;
  data?: unknown;
  timeout?: number;
  signal?: unknown;
}

/** What this function reads of an axios response, or of an axios error's. */
export interface AxiosResponseLike {
  status: number;
  headers?: unknown;
  config: AxiosRequestConfigLike;
}

/** What this function reads of an axios error. */
export interface AxiosErrorLike {
  config?: AxiosRequestConfigLike;
  response?: { status: number; headers?: unknown };
  code?: string;
}

/*
 * axios's interceptor and request signatures are generic and have changed across 1.x
 * minors; `any` at this one boundary keeps every version's instance (and HttpService's
 * axiosRef, typed from axios's ES module) assignable, and the values are read through
 * the Like types above.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AxiosValue = any;

/** What this function uses of an axios instance: its interceptors and `request()`. */
export interface AxiosInstanceLike {
  interceptors: {
    request: { use(onFulfilled: (config: AxiosValue) => AxiosValue): unknown };
    response: { use(onFulfilled: (response: AxiosValue) => AxiosValue, onRejected: (error: AxiosValue) => AxiosValue): unknown };
  };
  request(config: AxiosValue): Promise<AxiosValue>;
}

/** Kept on the config between attempts; a string key, because axios drops symbol keys when it merges configs. */
const STATE = 'idempotencyRetry';

/** One attempt's answer (or error), as this interceptor got it, and what it says for a retry. */
interface AttemptOutcome {
  readonly outcome: { readonly response: unknown } | { readonly error: unknown };
  /** Undefined: final, never retried (cancelled, or failed before it was sent). */
  readonly failure: Failure | undefined;
}

/**
 * One logical call, shared by its attempts. A class, not a plain object: axios's
 * mergeConfig copies plain objects, and every attempt must see the same state.
 */
class CallState {
  attempt = 0;
  /** Set while a retry is in flight: the first attempt's chain waits there for the retry's answer. */
  waiter?: (attempt: AttemptOutcome) => void;

  constructor(readonly key: string) {}
}

/** What a retry's own chain goes on with once its answer was handed over: nothing, ever. */
const HANDED_OVER = new Promise<never>(() => undefined);

/**
 * Gives every request of `instance` whose method is in `methods` one idempotency key for
 * all its attempts, and retries it as `createIdempotentFetch` does: network errors,
 * timeouts and the statuses of `retryOn`, with backoff or the server's `Retry-After`;
 * other answers (and errors) reach the caller unchanged after one attempt. Returns the
 * instance.
 *
 * @example
 * // @nestjs/axios
 * constructor(http: HttpService) { applyIdempotentRetries(http.axiosRef, { maxAttempts: 5 }); }
 */
export function applyIdempotentRetries<T extends AxiosInstanceLike>(instance: T, options: IdempotentRetryOptions = {}): T {
  if (!instance || typeof instance.request !== 'function' || typeof instance.interceptors?.request?.use !== 'function') {
    throw new IdempotencyConfigurationError(
      'applyIdempotentRetries: the first argument is not an axios instance.',
      'Pass axios.create(...) or HttpService.axiosRef (@nestjs/axios).',
    );
  }
  const policy = resolveRetryPolicy('applyIdempotentRetries', options);
  instance.interceptors.request.use((config: AxiosRequestConfigLike & Record<string, unknown>) => {
    const method = (config.method ?? 'get').toUpperCase();
    if (!policy.methods.has(method)) return config;
    if (policy.maxAttempts > 1 && isStream(config.data)) {
      throw new IdempotencyConfigurationError(
        `applyIdempotentRetries: ${method} ${config.url ?? ''} has a stream body, which cannot be sent again on a retry.`,
        'Pass the body as a string, an object or bytes, or use an instance without retries for streams.',
      );
    }
    const state = ((config[STATE] as CallState | undefined) ??= new CallState(headerOf(config.headers, policy.header) ?? callKey()));
    state.attempt++;
    config.headers = withHeader(config.headers, policy.header, state.key);
    if (policy.timeout !== undefined && !config.timeout) config.timeout = policy.timeout;
    // axios encodes a FormData with a new multipart boundary each time it sends it: encoded
    // once here, every attempt sends the same bytes (as createIdempotentFetch does).
    if (policy.maxAttempts > 1 && isFormData(config.data)) return encodeFormData(config);
    return config;
  });
  instance.interceptors.response.use(
    (response: { status: number; headers?: unknown; config: Record<string, unknown> }) =>
      onAttempt(instance, policy, response.config, {
        outcome: { response },
        failure: { reason: 'status', status: response.status, headers: response.headers },
      }),
    (error: { config?: Record<string, unknown>; response?: { status: number; headers?: unknown }; code?: string }) => {
      const config = error?.config;
      if (!config || !config[STATE]) return Promise.reject(error);
      if (error.code === 'ERR_CANCELED') return onAttempt(instance, policy, config, { outcome: { error }, failure: undefined });
      const failure: Failure = error.response
        ? { reason: 'status', status: error.response.status, headers: error.response.headers, error }
        : { reason: error.code === 'ECONNABORTED' || error.code === 'ETIMEDOUT' ? 'timeout' : 'network', error };
      return onAttempt(instance, policy, config, { outcome: { error }, failure });
    },
  );
  return instance;
}

interface Failure {
  readonly reason: RetryReason;
  readonly status?: number;
  readonly headers?: unknown;
  readonly error?: unknown;
}

/**
 * An attempt's answer reached this interceptor. A retry's answer is handed to the first
 * attempt's chain, which waits for it, and the retry's own chain stops here: the response
 * interceptors registered after this one never see it, so they process the call's answer
 * once, in the first attempt's chain, as for a call answered at the first attempt (before,
 * both chains ran them on the same object: an interceptor unwrapping in place,
 * `response.data = response.data.data`, left `undefined`; issue 42).
 */
function onAttempt(
  instance: AxiosInstanceLike,
  policy: RetryPolicy,
  config: AxiosRequestConfigLike & Record<string, unknown>,
  attempt: AttemptOutcome,
): Promise<unknown> {
  const state = config?.[STATE] as CallState | undefined;
  if (!state) return settle(attempt.outcome);
  const waiter = state.waiter;
  if (waiter) {
    state.waiter = undefined;
    waiter(attempt);
    return HANDED_OVER;
  }
  return retryUntilSettled(instance, policy, config, state, attempt);
}

/** The first attempt's chain: retries while the policy says so, then settles with the last attempt's own answer. */
async function retryUntilSettled(
  instance: AxiosInstanceLike,
  policy: RetryPolicy,
  config: AxiosRequestConfigLike & Record<string, unknown>,
  state: CallState,
  first: AttemptOutcome,
): Promise<unknown> {
  let { outcome, failure } = first;
  for (;;) {
    if (!failure || state.attempt >= policy.maxAttempts) return settle(outcome);
    if (!policy.retries({ attempt: state.attempt, reason: failure.reason, status: failure.status, error: failure.error })) {
      return settle(outcome);
    }
    const delayMs = delayBefore(policy, state.attempt, headerOf(failure.headers, 'retry-after') ?? null);
    if (delayMs === undefined) return settle(outcome);
    policy.onRetry?.({
      attempt: state.attempt,
      key: state.key,
      reason: failure.reason,
      status: failure.status,
      error: failure.error,
      delayMs,
    });
    await waitUnlessAborted(delayMs, config.signal as AbortSignal | undefined);
    const next = new Promise<AttemptOutcome>((resolve) => (state.waiter = resolve));
    // Sent with instance.request(), so the application's request interceptors see every
    // attempt. A retry that fails before this interceptor sees it (a request interceptor
    // threw) rejects its own chain: final.
    instance.request(config).catch((error: unknown) => {
      const waiter = state.waiter;
      state.waiter = undefined;
      waiter?.({ outcome: { error }, failure: undefined });
    });
    ({ outcome, failure } = await next);
  }
}

function settle(outcome: AttemptOutcome['outcome']): Promise<unknown> {
  return 'error' in outcome ? Promise.reject(outcome.error) : Promise.resolve(outcome.response);
}

/** A spec FormData (Node 18+'s global, a browser's), which `Response` can encode. */
function isFormData(data: unknown): data is FormData {
  return typeof FormData !== 'undefined' && data instanceof FormData;
}

/**
 * Replaces a FormData body by its multipart encoding, once: the bytes and the
 * `Content-Type` with its boundary, both from `Response` (what `fetch` would send).
 */
async function encodeFormData<C extends AxiosRequestConfigLike>(config: C): Promise<C> {
  const encoded = new Response(config.data as FormData);
  const bytes = new Uint8Array(await encoded.arrayBuffer());
  config.headers = withHeader(config.headers, 'Content-Type', encoded.headers.get('content-type') ?? 'multipart/form-data');
  config.data = bytes;
  return config;
}

function isStream(data: unknown): boolean {
  if (typeof ReadableStream !== 'undefined' && data instanceof ReadableStream) return true;
  return typeof (data as { pipe?: unknown } | null)?.pipe === 'function' && typeof (data as { on?: unknown }).on === 'function';
}

/** A header of axios's headers (an AxiosHeaders or a plain object), by name in any case. */
function headerOf(headers: unknown, name: string): string | undefined {
  if (!headers || typeof headers !== 'object') return undefined;
  const get = (headers as { get?: (name: string) => unknown }).get;
  const value =
    typeof get === 'function'
      ? get.call(headers, name)
      : Object.entries(headers).find(([header]) => header.toLowerCase() === name.toLowerCase())?.[1];
  return value === undefined || value === null || value === false ? undefined : String(value);
}

function withHeader(headers: unknown, name: string, value: string): unknown {
  if (headers && typeof (headers as { set?: unknown }).set === 'function') {
    (headers as { set: (name: string, value: string) => void }).set(name, value);
    return headers;
  }
  const plain = { ...((headers as Record<string, unknown>) ?? {}) };
  for (const header of Object.keys(plain)) if (header.toLowerCase() === name.toLowerCase()) delete plain[header];
  return { ...plain, [name]: value };
}
