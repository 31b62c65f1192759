import type { ExecutionContext, HttpException } from '@nestjs/common';
import { isThenable } from '../../../core/thenable.js';
import {
  IdempotencyConfigurationError,
  IdempotencyKeyInvalidError,
  IdempotencyNotReplayableError,
  type IdempotencyError,
} from '../../../core/errors.js';
import { parseIdempotencyKeyHeader } from '../../../core/key.js';
import { decodeValue, encodeJsonError, valueOutcome, type OutcomeMeta, type StoredOutcome } from '../../../core/outcome.js';
import { REPLAYED_HEADER } from '../../idempotency.constants.js';
import { replayedError, replayedHttpErrorOf06 } from '../../replayed-error.js';
import type { IdempotencyPrincipal } from '../../principal.js';
import { setHeader, toProblemHttpException, type HttpResponseLike } from '../../problem.js';
import type { IdempotentOptions } from '../../idempotency.options.js';
import type { ResolvedHandlerConfig } from '../../transport.adapter.js';
import {
  describeHeaderKeySource,
  keyHeadersOf,
  type BaseHandlerConfig,
  type HandlerSite,
  type MergedOptions,
  type Transport,
} from '../transport.js';
import { hiddenBodyMaterial } from './http-body-material.js';
import { httpPrincipalOf } from './http-principal.js';
import { requestOf, responseOf } from './http-request.js';
import { declaredHttpMethodOf, routeOperationOf } from './route-operation.js';

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
export class HttpTransportAdapter implements Transport {
  readonly name = 'http';
  readonly reach = 'request' as const;
  readonly defaultInFlight = 'reject' as const;

  /** Routes: `@Post()`, `@Put()`, ... on a controller. */
  recognises(site: HandlerSite): boolean {
    return declaredHttpMethodOf(site.method) !== undefined;
  }

  /** Judged on the handler's own options: a module-wide `ack: true` in a hybrid app is meant for its consumers. */
  validate(where: string, _merged: MergedOptions, own: IdempotentOptions): void {
    if (own.ack === true) {
      throw new IdempotencyConfigurationError(
        `${where}: ack: true acknowledges broker messages, and this is an HTTP route.`,
        'Remove ack from this route; set it on RabbitMQ @MessagePattern / @EventPattern handlers only.',
      );
    }
  }

  /** The key headers, and the response headers stored and replayed (lower-case). */
  configure(base: BaseHandlerConfig): ResolvedHandlerConfig {
    return {
      ...base,
      keyHeaders: keyHeadersOf(base.options),
      replayHeaders: new Set([...DEFAULT_REPLAY_HEADERS, ...(base.options.replayHeaders ?? []).map((h) => h.toLowerCase())]),
    };
  }

  /** `POST /v1/refunds/:id`: the method and the full route template. */
  operationOf(context: ExecutionContext): string {
    return routeOperationOf(context);
  }

  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    return keyFromHeaders(requestOf(context).headers, config.keyHeaders);
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return describeHeaderKeySource(config.options);
  }

  /** Who is asking: `request.user` and `request.auth`, typed; credentials without either are refused (see `httpPrincipalOf`). */
  principal(context: ExecutionContext): IdempotencyPrincipal | undefined {
    return httpPrincipalOf(requestOf(context), 'request', '(ctx) => ctx.switchToHttp().getRequest().user.accountId');
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
    return isThenable(hidden) ? hidden.then((more) => ({ ...material, ...more })) : { ...material, ...hidden };
  }

  captureValue(context: ExecutionContext, value: unknown, config: ResolvedHandlerConfig): StoredOutcome {
    const response = responseOf(context);
    if (response.headersSent || response.sent || response.raw?.headersSent) {
      return { kind: 'unstorable', reason: 'the handler sent the response itself (@Res() without passthrough)' };
    }
    return valueOutcome(value, 'json', this.meta(response, response.statusCode, config));
  }

  /**
   * A cached error (`cacheErrors`), as the replay throws it again to the application's
   * exception filters: its class chain, name, message and own fields (see
   * `replayedError`). `props.body` and the status are what Nest's default handling
   * answers (the HttpException's body and status, else 500), for `inspect()` and for
   * 0.6.x instances replaying the record during an upgrade.
   */
  captureError(context: ExecutionContext, error: unknown, config: ResolvedHandlerConfig): StoredOutcome {
    const response = responseOf(context);
    const http = asHttpException(error);
    const status = http ? http.getStatus() : 500;
    const body = http ? http.getResponse() : { statusCode: 500, message: 'Internal server error' };
    return { kind: 'error', error: { ...encodeJsonError(error), props: { body } }, meta: this.meta(response, status, config) };
  }

  /**
   * The stored answer, marked `Idempotent-Replayed: true` with its stored headers. A
   * cached error is thrown again, rebuilt on its class, so that the exception filters that
   * answered the first caller answer the same (and, from the outermost interceptor, no
   * interceptor of the application maps it again).
   */
  replay(context: ExecutionContext, outcome: StoredOutcome, config?: ResolvedHandlerConfig): unknown {
    const response = responseOf(context);
    if (outcome.kind === 'unstorable') {
      throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    }
    const meta = outcome.meta ?? {};
    for (const [name, value] of Object.entries(meta.headers ?? {})) setHeader(response, name, value);
    setHeader(response, REPLAYED_HEADER, 'true');
    if (outcome.kind === 'error') {
      const listed = config?.policy.errorClasses;
      // Records of 0.6.x have no chain: their body and status, as then.
      throw outcome.error.chain ? replayedError(outcome.error, listed) : replayedHttpErrorOf06(outcome.error, meta.status ?? 500, listed);
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

function asHttpException(error: unknown): HttpException | undefined {
  const candidate = error as Partial<HttpException> | null;
  return candidate && typeof candidate.getStatus === 'function' && typeof candidate.getResponse === 'function'
    ? (candidate as HttpException)
    : undefined;
}
