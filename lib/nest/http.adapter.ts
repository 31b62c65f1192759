import { HttpException, type ExecutionContext } from '@nestjs/common';
import { IdempotencyKeyInvalidError, IdempotencyNotReplayableError, type IdempotencyError } from '../core/errors.js';
import { parseIdempotencyKeyHeader } from '../core/key.js';
import { decodeValue, encodeValue, unstorableReason, type OutcomeMeta, type StoredOutcome } from '../core/outcome.js';
import { hiddenBodyMaterial, type BodyCarrier } from './http-body-material.js';
import { REPLAYED_HEADER } from './idempotency.constants.js';
import { principalOfUser } from './principal.js';
import { setHeader, toProblemHttpException, type HttpResponseLike } from './problem.js';
import type { ResolvedHandlerConfig, TransportAdapter } from './transport.adapter.js';

interface HttpRequestLike extends BodyCarrier {
  params?: unknown;
  query?: unknown;
  user?: unknown;
}

export const DEFAULT_REPLAY_HEADERS: readonly string[] = [
  'content-type',
  'location',
  'content-location',
  'content-language',
  'content-disposition',
  'etag',
  'last-modified',
  'link',
];

/**
 * The one idempotency key of a request's headers (`keyHeaders`, lower-case, in order):
 * each value parsed under the header rules; two headers that disagree are two keys, not a
 * choice, and refused. `undefined` when none is set.
 */
export function keyFromHeaders(headers: Record<string, string | string[] | undefined>, keyHeaders: readonly string[]): string | undefined {
  let key: string | undefined;
  for (const name of keyHeaders) {
    const value = headers[name];
    if (value === undefined) continue;
    const parsed = parseIdempotencyKeyHeader(value);
    if (key !== undefined && key !== parsed) {
      throw new IdempotencyKeyInvalidError('the request carries more than one Idempotency-Key value');
    }
    key = parsed;
  }
  return key;
}

/** Express and Fastify, told apart by the reply's shape. */
export class HttpTransportAdapter implements TransportAdapter {
  readonly defaultInFlight = 'reject' as const;

  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    return keyFromHeaders(requestOf(context).headers, config.keyHeaders);
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return config.options.key
      ? 'the request (the key option returned nothing)'
      : `the ${config.options.header ?? 'Idempotency-Key'} header`;
  }

  /** Who is asking: `request.user`'s id (see `principalOfUser`). */
  principal(context: ExecutionContext): string | number | undefined {
    return principalOfUser(requestOf(context).user, 'request', '(ctx) => ctx.switchToHttp().getRequest().user.accountId');
  }

  /**
   * Method, route parameters, query and parsed body; plus, where `body` does not show
   * them, the raw bytes (Nest's `rawBody: true`) and multer's uploaded files (see
   * `hiddenBodyMaterial`).
   */
  fingerprintMaterial(context: ExecutionContext): unknown {
    const request = requestOf(context);
    const material = { method: request.method, params: request.params ?? {}, query: request.query ?? {}, body: request.body ?? null };
    const hidden = hiddenBodyMaterial(request);
    if (hidden === undefined) return material;
    return isPromise(hidden) ? hidden.then((more) => ({ ...material, ...more })) : { ...material, ...hidden };
  }

  captureValue(context: ExecutionContext, value: unknown, config: ResolvedHandlerConfig): StoredOutcome {
    const response = responseOf(context);
    if (response.headersSent || response.sent || response.raw?.headersSent) {
      return { kind: 'unstorable', reason: 'the handler sent the response itself (@Res() without passthrough)' };
    }
    const reason = unstorableReason(value);
    if (reason) return { kind: 'unstorable', reason };
    return { kind: 'value', value: encodeValue(value), meta: this.meta(response, response.statusCode, config) };
  }

  captureError(context: ExecutionContext, error: unknown, config: ResolvedHandlerConfig): StoredOutcome {
    const response = responseOf(context);
    const http = asHttpException(error);
    const status = http ? http.getStatus() : 500;
    const body = http ? http.getResponse() : { statusCode: 500, message: 'Internal server error' };
    return {
      kind: 'error',
      error: {
        name: http ? (error as Error).name : 'InternalServerErrorException',
        message: http ? (error as Error).message : 'Internal server error',
        props: { body },
      },
      meta: this.meta(response, status, config),
    };
  }

  replay(context: ExecutionContext, outcome: StoredOutcome): unknown {
    const response = responseOf(context);
    if (outcome.kind === 'unstorable') {
      throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    }
    const meta = outcome.meta ?? {};
    for (const [name, value] of Object.entries(meta.headers ?? {})) setHeader(response, name, value);
    setHeader(response, REPLAYED_HEADER, 'true');
    if (outcome.kind === 'error') {
      const body = outcome.error.props?.body as string | Record<string, unknown>;
      throw new HttpException(body, meta.status ?? 500);
    }
    if (meta.status) response.status(meta.status);
    return decodeValue(outcome.value);
  }

  toTransportError(context: ExecutionContext, error: IdempotencyError): unknown {
    return toProblemHttpException(responseOf(context), error);
  }

  private meta(response: HttpResponseLike, status: number, config: ResolvedHandlerConfig): OutcomeMeta {
    const all = response.getHeaders();
    let headers: Record<string, string | string[]> | undefined;
    for (const name of Object.keys(all)) {
      const lower = name.toLowerCase();
      const value = all[name];
      if (value === undefined || !config.replayHeaders.has(lower)) continue;
      (headers ??= {})[lower] = typeof value === 'number' ? String(value) : value;
    }
    return headers ? { status, headers } : { status };
  }
}

/**
 * The request and response, read the way `switchToHttp()` reads them (arguments 0 and 1)
 * without its per-call closures: these run several times on every request.
 */
function requestOf(context: ExecutionContext): HttpRequestLike {
  return typeof context.getArgByIndex === 'function'
    ? context.getArgByIndex<HttpRequestLike>(0)
    : context.switchToHttp().getRequest<HttpRequestLike>();
}

function responseOf(context: ExecutionContext): HttpResponseLike {
  return typeof context.getArgByIndex === 'function'
    ? context.getArgByIndex<HttpResponseLike>(1)
    : context.switchToHttp().getResponse<HttpResponseLike>();
}

function asHttpException(error: unknown): HttpException | undefined {
  const candidate = error as Partial<HttpException> | null;
  return candidate && typeof candidate.getStatus === 'function' && typeof candidate.getResponse === 'function'
    ? (candidate as HttpException)
    : undefined;
}

function isPromise<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as Promise<T>).then === 'function';
}
