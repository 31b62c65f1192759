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

/**
 * One logical call, shared by its attempts. A class, not a plain object: axios's
 * mergeConfig copies plain objects, and every attempt must see the same state.
 */
class CallState {
  attempt = 0;
  /** The last attempt's own answer (or error), as axios answered it: what the call settles with. */
  settled?: { readonly response: unknown } | { readonly error: unknown };

  constructor(readonly key: string) {}
}

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
    return config;
  });
  instance.interceptors.response.use(
    (response: { status: number; headers?: unknown; config: Record<string, unknown> }) =>
      retryOrSettle(
        instance,
        policy,
        response.config,
        { reason: 'status', status: response.status, headers: response.headers },
        { response },
      ),
    (error: { config?: Record<string, unknown>; response?: { status: number; headers?: unknown }; code?: string }) => {
      const config = error?.config;
      if (!config || !config[STATE]) return Promise.reject(error);
      if (error.code === 'ERR_CANCELED') return settleWith(config[STATE] as CallState, { error });
      const failure: Failure = error.response
        ? { reason: 'status', status: error.response.status, headers: error.response.headers, error }
        : { reason: error.code === 'ECONNABORTED' || error.code === 'ETIMEDOUT' ? 'timeout' : 'network', error };
      return retryOrSettle(instance, policy, config, failure, { error });
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
 * Retries the call, or settles it with this attempt's answer. A retry is sent with
 * `instance.request()`, so the application's request interceptors see every attempt; its
 * answer then also passes the response interceptors registered after this one, once in
 * the retry's own chain and again in this attempt's. So what this attempt's chain goes on
 * with is not the retry's processed answer but the last attempt's own (`settled`), and the
 * application's interceptors transform the call's answer once.
 */
async function retryOrSettle(
  instance: AxiosInstanceLike,
  policy: RetryPolicy,
  config: AxiosRequestConfigLike & Record<string, unknown>,
  failure: Failure,
  outcome: NonNullable<CallState['settled']>,
): Promise<unknown> {
  const state = config?.[STATE] as CallState | undefined;
  if (!state) return 'error' in outcome ? Promise.reject(outcome.error) : outcome.response;
  if (state.attempt >= policy.maxAttempts) return settleWith(state, outcome);
  if (!policy.retries({ attempt: state.attempt, reason: failure.reason, status: failure.status, error: failure.error })) {
    return settleWith(state, outcome);
  }
  const delayMs = delayBefore(policy, state.attempt, headerOf(failure.headers, 'retry-after') ?? null);
  if (delayMs === undefined) return settleWith(state, outcome);
  policy.onRetry?.({
    attempt: state.attempt,
    key: state.key,
    reason: failure.reason,
    status: failure.status,
    error: failure.error,
    delayMs,
  });
  await waitUnlessAborted(delayMs, config.signal as AbortSignal | undefined);
  state.settled = undefined;
  let retried: NonNullable<CallState['settled']>;
  try {
    retried = { response: await instance.request(config) };
  } catch (error) {
    retried = { error };
  }
  // Undefined when the retry stopped before this interceptor saw it (a request interceptor threw).
  const last = state.settled ?? retried;
  if ('error' in last) throw last.error;
  return last.response;
}

/** Settles the call with this attempt's own answer, kept for the attempts that wait on it. */
function settleWith(state: CallState, outcome: NonNullable<CallState['settled']>): unknown {
  state.settled = outcome;
  return 'error' in outcome ? Promise.reject(outcome.error) : outcome.response;
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
