import { HttpException, type ExecutionContext } from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  IdempotencyKeyInvalidError,
  parseIdempotencyKeyHeader,
  IdempotencyNotReplayableError,
  decodeValue,
  encodeValue,
  unstorableReason,
  type IdempotencyError,
  type OutcomeMeta,
  type StoredOutcome,
} from '../core/index.js';
import { REPLAYED_HEADER } from './idempotency.constants.js';
import { identityOf } from './principal.js';
import { setHeader, toProblemHttpException, type HttpResponseLike } from './problem.js';
import type { ResolvedHandlerConfig, TransportAdapter } from './transport.adapter.js';

interface HttpRequestLike {
  method?: string;
  headers: Record<string, string | string[] | undefined>;
  params?: unknown;
  query?: unknown;
  body?: unknown;
  user?: unknown;
}

/** The members of `request.user` the default principal is read from, in order. */
const PRINCIPAL_FIELDS = ['id', 'sub', 'userId', '_id'] as const;

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

/** Express and Fastify, told apart by the reply's shape. */
export class HttpTransportAdapter implements TransportAdapter {
  readonly defaultInFlight = 'reject' as const;

  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    const headers = requestOf(context).headers;
    let key: string | undefined;
    for (const name of config.keyHeaders) {
      const value = headers[name];
      if (value === undefined) continue;
      const parsed = parseIdempotencyKeyHeader(value);
      // `Idempotency-Key: a` with `X-Idempotency-Key: b` is two keys, not a choice.
      if (key !== undefined && key !== parsed) {
        throw new IdempotencyKeyInvalidError('the request carries more than one Idempotency-Key value');
      }
      key = parsed;
    }
    return key;
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return config.options.key
      ? 'the request (the key option returned nothing)'
      : `the ${config.options.header ?? 'Idempotency-Key'} header`;
  }

  /**
   * Who is asking: `request.user.id`, `.sub`, `.userId` or `._id` (a string, a number,
   * or an object with `toHexString()` or its own `toString()`, such as an ObjectId).
   * Without `request.user` the request is anonymous; with a user whose identity cannot
   * be read it is refused, because treating it as anonymous would let one user replay
   * another's response.
   */
  principal(context: ExecutionContext): string | number | undefined {
    const user = requestOf(context).user;
    if (user === undefined || user === null || user === false) return undefined;
    if (typeof user === 'object') {
      for (const field of PRINCIPAL_FIELDS) {
        const id = identityOf((user as Record<string, unknown>)[field]);
        if (id !== undefined) return id;
      }
    } else {
      const id = identityOf(user);
      if (id !== undefined) return id;
    }
    throw new IdempotencyConfigurationError(
      `@Idempotent() cannot tell who sent this request: request.user is set, but none of ${PRINCIPAL_FIELDS.map((f) => `user.${f}`).join(', ')} holds an identity (a string, a number or an id object).`,
      'Tell it how to read the principal: @Idempotent({ scope: (ctx) => ctx.switchToHttp().getRequest().user.accountId }) or the same `scope` option in IdempotencyModule.forRoot().',
    );
  }

  fingerprintMaterial(context: ExecutionContext): unknown {
    const request = requestOf(context);
    return { method: request.method, params: request.params ?? {}, query: request.query ?? {}, body: request.body ?? null };
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
