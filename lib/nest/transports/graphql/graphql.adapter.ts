import { HttpException, IntrinsicException, type ExecutionContext } from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  IdempotencyKeyInvalidError,
  IdempotencyNotReplayableError,
  decodeValue,
  encodeJsonError,
  encodeValue,
  unstorableReason,
  type IdempotencyError,
  type IdempotencyInFlightError,
  type StoredOutcome,
} from '../../../core/index.js';
import type { IdempotentOptions } from '../../idempotency.options.js';
import { keyFromHeaders } from '../http/http.adapter.js';
import type { HttpRequestLike } from '../http/http-request.js';
import {
  describeHeaderKeySource,
  keyHeadersOf,
  NO_HEADERS,
  type BaseHandlerConfig,
  type HandlerSite,
  type MergedOptions,
  type Transport,
} from '../transport.js';
import { GRAPHQL_REFUSALS, graphqlResolverKindOf } from './graphql-resolver.js';
import { captureShaped, restoreShaped, UnshapeableValueError } from './replay-shape.js';
import { principalOfIdentity, type IdempotencyPrincipal } from '../../principal.js';
import { httpPrincipalOf } from '../http/http-principal.js';
import { problemOf } from '../../problem.js';
import { replayedError } from '../../replayed-error.js';
import type { ResolvedHandlerConfig } from '../../transport.adapter.js';

/** The parts of graphql-js's `GraphQLResolveInfo` read here (the `graphql` package itself is never loaded). */
interface ResolveInfoLike {
  fieldName?: string;
  parentType?: { name?: string };
  path?: ResponsePath;
  operation?: { operation?: string };
  /** graphql-js's `GraphQLOutputType` and `GraphQLSchema`, read by `captureShaped`. */
  returnType?: unknown;
  schema?: unknown;
}

interface ResponsePath {
  readonly prev: ResponsePath | undefined;
  readonly key: string | number;
}

/** What a client finds in `errors[].extensions` when the library refuses a mutation. */
export interface IdempotencyGraphQLErrorExtensions {
  /** Stable machine-readable code, e.g. `IDEMPOTENCY_REQUEST_IN_FLIGHT`. */
  readonly code: string;
  /** The HTTP status the same refusal gets on an HTTP route (400, 409, 422, 503, 500). */
  readonly status: number;
  readonly title: string;
  /** How to fix it. */
  readonly hint: string;
  /** For `IDEMPOTENCY_REQUEST_IN_FLIGHT`: whole seconds to wait before retrying, as HTTP's `Retry-After`. */
  readonly retryAfter?: number;
}

/**
 * One of this library's refusals as a resolver error. graphql-js copies `extensions`
 * of the error a resolver throws into the GraphQL error it reports, so no `GraphQLError`
 * (and no `graphql` import) is needed. An IntrinsicException: Nest's default exception
 * filter does not log it, as an HTTP refusal is not logged either (configuration errors
 * are reported by the module's logger).
 */
export class IdempotencyGraphQLError extends IntrinsicException {
  readonly extensions: IdempotencyGraphQLErrorExtensions;
  constructor(error: IdempotencyError) {
    const problem = problemOf(error);
    super(problem.detail, { cause: error });
    this.name = 'IdempotencyGraphQLError';
    const retryAfterMs = (error as Partial<IdempotencyInFlightError>).retryAfterMs;
    this.extensions = {
      code: problem.code,
      status: problem.status,
      title: problem.title,
      hint: problem.hint,
      ...(retryAfterMs ? { retryAfter: Math.max(1, Math.ceil(retryAfterMs / 1000)) } : {}),
    };
  }
}

/**
 * GraphQL mutations (`@Mutation()` resolvers of `@nestjs/graphql`, Apollo or any driver
 * that puts the HTTP request in the GraphQL context as `req` or `request`).
 *
 * - Key: the `Idempotency-Key` / `X-Idempotency-Key` header of the HTTP request that
 *   carries the operation, under the HTTP rules (one value, structured-field strings).
 * - Scope: `graphql Mutation.refund @a`, the field and its response path (alias-aware),
 *   so several mutations of one operation, sent with one key, each get their own record.
 * - Fingerprint: the field's arguments. Principal: the id of the GraphQL context's `user`
 *   and of `request.user` (they must agree), as on HTTP.
 * - A duplicate gets the stored value as the field's value; refusals are GraphQL errors
 *   whose `extensions.code` is the library's stable code.
 */
export class GraphqlTransportAdapter implements Transport {
  readonly name = 'graphql';
  readonly reach = 'request' as const;
  readonly defaultInFlight = 'reject' as const;

  /** Resolvers of every kind: mutations are served, the others refused at boot (`validate`). */
  recognises(site: HandlerSite): boolean {
    return graphqlResolverKindOf(site.method) !== undefined;
  }

  /** Only mutations are served; `ack` is for broker messages. */
  validate(where: string, _merged: MergedOptions, own: IdempotentOptions, site: HandlerSite): void {
    const kind = graphqlResolverKindOf(site.method);
    const refusal = kind === undefined || kind === 'graphql-mutation' ? undefined : GRAPHQL_REFUSALS[kind];
    if (refusal) throw new IdempotencyConfigurationError(`${where}: ${refusal[0]}`, refusal[1]);
    if (own.ack === true) {
      throw new IdempotencyConfigurationError(
        `${where}: ack: true acknowledges broker messages, and this is a GraphQL mutation.`,
        'Remove ack from this mutation; set it on RabbitMQ @MessagePattern / @EventPattern handlers only.',
      );
    }
  }

  configure(base: BaseHandlerConfig): ResolvedHandlerConfig {
    return { ...base, keyHeaders: keyHeadersOf(base.options), replayHeaders: NO_HEADERS };
  }

  /** `graphql Mutation.refund @a`: the field and its response path. */
  operationOf(context: ExecutionContext): string {
    return graphqlOperationOf(context);
  }

  /** Only root fields of a mutation operation are served (boot refuses queries, subscriptions and field resolvers). */
  admit(context: ExecutionContext, config: ResolvedHandlerConfig): void {
    const info = infoOf(context);
    if (info?.operation?.operation === 'mutation' && info.path !== undefined && info.path.prev === undefined) return;
    throw new IdempotencyConfigurationError(
      `@Idempotent() on ${config.handlerName}: it protects root fields of GraphQL mutations, and this field was resolved ${
        info?.path ? `at ${pathOf(info.path)} of a ${info.operation?.operation ?? 'GraphQL'} operation` : 'without GraphQL resolve info'
      }.`,
      'Put @Idempotent() on @Mutation() resolvers only.',
    );
  }

  /**
   * The key header of the HTTP request carrying the operation. A batched request (an
   * array of operations, Apollo's `allowBatchedHttpRequests`) carries one header for them
   * all, and two mutations of a batch with one key would share one record: refused, one
   * key names one operation.
   */
  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    const request = requestOf(context);
    const headers = request?.headers;
    const key = headers ? keyFromHeaders(headers, config.keyHeaders) : undefined;
    if (key !== undefined && Array.isArray(request?.body) && request.body.length > 1) {
      throw new IdempotencyKeyInvalidError(
        `a batched GraphQL request of ${request.body.length} operations carries one Idempotency-Key; send each mutation in a request of its own with its own key`,
      );
    }
    return key;
  }

  describeKeySource(config: ResolvedHandlerConfig, context?: ExecutionContext): string {
    return describeHeaderKeySource(
      config.options,
      context && !requestOf(context)?.headers
        ? '(the GraphQL context holds no HTTP request as req or request)'
        : 'of the HTTP request carrying the GraphQL operation',
    );
  }

  /**
   * Who is asking: the id of the GraphQL context's `user` (where an Apollo or Mercurius
   * context factory, a graphql-ws `onConnect` or an auth guard puts it) and the caller of
   * the HTTP request (`request.user`, `request.auth`, read as on HTTP: see
   * `httpPrincipalOf`, which also refuses credentials that identify no one). Either alone
   * is the principal; both must name the same identity, or the mutation is refused: which
   * of two identities is the caller is the application's decision (the `scope` option),
   * never a guess that could hand one user's record to another.
   */
  principal(context: ExecutionContext): IdempotencyPrincipal | undefined {
    const request = requestOf(context);
    const user = contextOf(context)?.user;
    const fromContext =
      user === undefined || user === null || user === false || user === request?.user
        ? undefined
        : // The same source as request.user's: one user, wherever the app put it (a context factory copies it).
          principalOfIdentity(user, 'user', 'mutation', SCOPE_EXAMPLE, undefined, "the GraphQL context's user");
    // The context's user is the caller when the HTTP request names none: its credentials were read by the context factory.
    const contextOnly = fromContext !== undefined && request?.user === undefined && request?.auth === undefined;
    const fromRequest = contextOnly ? undefined : httpPrincipalOf(request, 'mutation', SCOPE_EXAMPLE);
    if (!fromContext) return fromRequest;
    if (fromRequest === undefined || fromRequest.identity === fromContext.identity) return fromRequest ?? fromContext;
    throw new IdempotencyConfigurationError(
      "@Idempotent() cannot tell who sent this mutation: the GraphQL context's user and request.user identify different principals.",
      `Put one user in the GraphQL context (e.g. context: ({ req }) => ({ req, user: req.user })), or say which one scopes the key: @Idempotent({ scope: ${SCOPE_EXAMPLE} }) or the same \`scope\` option in IdempotencyModule.forRoot().`,
    );
  }

  /** The field's arguments, as graphql-js coerced them (variables substituted, defaults applied). */
  fingerprintMaterial(context: ExecutionContext): unknown {
    return context.getArgByIndex<unknown>(1) ?? {};
  }

  /**
   * The value walked along the mutation's return type (see `captureShaped`): the runtime
   * type of each object at a union or interface position, getter fields materialised,
   * and custom scalar values (a `Date`) as the scalar serializes them, so that a replay
   * resolves as the first answer did.
   */
  captureValue(context: ExecutionContext, value: unknown): StoredOutcome {
    const reason = unstorableReason(value);
    if (reason) return { kind: 'unstorable', reason };
    let shaped: unknown;
    try {
      shaped = captureShaped(value, context.getArgByIndex<unknown>(2), infoOf(context));
    } catch (error) {
      if (error instanceof UnshapeableValueError) return { kind: 'unstorable', reason: error.message };
      // A getter or toJSON the schema walk does not survive: stored as JSON writes it, as before.
      shaped = value;
    }
    return { kind: 'value', value: encodeValue(shaped) };
  }

  /**
   * A cached error (`cacheErrors`), as the replay throws it again to the application's
   * exception filters (`GqlExceptionFilter`s turning a domain error into a `GraphQLError`):
   * its class chain, name, message and own fields (see `replayedError`). `props` keeps
   * what 0.6.x stored (an HttpException's status and body, else `extensions`), for
   * instances of that version during an upgrade.
   */
  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    const encoded = encodeJsonError(error);
    const http = error as Partial<HttpException> | null;
    if (http && typeof http.getStatus === 'function' && typeof http.getResponse === 'function') {
      return { kind: 'error', error: { ...encoded, props: { status: http.getStatus(), body: http.getResponse() } } };
    }
    const extensions = (error as { extensions?: unknown } | null)?.extensions;
    return {
      kind: 'error',
      error: { ...encoded, props: typeof extensions === 'object' && extensions !== null ? { extensions: { ...extensions } } : {} },
    };
  }

  replay(context: ExecutionContext, outcome: StoredOutcome, config?: ResolvedHandlerConfig): unknown {
    if (outcome.kind === 'value') return restoreShaped(withDates(decodeValue(outcome.value)), infoOf(context));
    if (outcome.kind === 'unstorable') throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    // Rebuilt on its class, so that the filter that answered the first caller answers again.
    if (outcome.error.chain) throw replayedError(outcome.error, config?.policy.errorClasses);
    // A record of 0.6.x: as then.
    const props = outcome.error.props ?? {};
    if (typeof props.status === 'number' && props.body !== undefined) {
      throw new HttpException(props.body as string | Record<string, unknown>, props.status);
    }
    const error = new Error(outcome.error.message) as Error & { extensions?: unknown };
    Object.defineProperty(error, 'name', { value: outcome.error.name, enumerable: false, configurable: true, writable: true });
    if (props.extensions) error.extensions = props.extensions;
    throw error;
  }

  toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    return new IdempotencyGraphQLError(error);
  }
}

/**
 * The operation part of a mutation's scope: `graphql Mutation.refund @refund`, or
 * `graphql Mutation.refund @a` for `a: refund(...)`. The response path keeps two
 * mutations of one operation apart, so one `Idempotency-Key` can cover the operation.
 */
function graphqlOperationOf(context: ExecutionContext): string {
  const info = infoOf(context);
  const handler = context.getHandler();
  const field = `${info?.parentType?.name ?? context.getClass().name}.${info?.fieldName ?? handler.name}`;
  return `graphql ${field} @${info?.path ? pathOf(info.path) : (info?.fieldName ?? handler.name)}`;
}

/** How a `scope` option reads the principal of a mutation (the GraphQL context is the third resolver argument). */
const SCOPE_EXAMPLE = '(ctx) => ctx.getArgByIndex(2).user.accountId';

/** The GraphQL context: the third resolver argument. */
function contextOf(context: ExecutionContext): Record<string, unknown> | undefined {
  const graphqlContext = context.getArgByIndex<unknown>(2);
  return typeof graphqlContext === 'object' && graphqlContext !== null ? (graphqlContext as Record<string, unknown>) : undefined;
}

/** Resolver arguments are `(root, args, context, info)`. */
function infoOf(context: ExecutionContext): ResolveInfoLike | undefined {
  const info = context.getArgByIndex<unknown>(3);
  return typeof info === 'object' && info !== null ? (info as ResolveInfoLike) : undefined;
}

/**
 * The HTTP request behind the operation: `context.req` (Apollo on Express and Fastify,
 * Nest's default context) or `context.request` (some custom contexts, Mercurius's
 * `reply.request`).
 */
function requestOf(context: ExecutionContext): HttpRequestLike | undefined {
  const graphqlContext = contextOf(context);
  if (!graphqlContext) return undefined;
  const request = (graphqlContext.req ?? graphqlContext.request ?? (graphqlContext.reply as { request?: unknown } | undefined)?.request) as
    HttpRequestLike | undefined;
  return typeof request === 'object' && request !== null ? request : undefined;
}

/** Where a value stored by 0.4.0 keeps the paths of its `Date`s (records written since carry them as scalar marks). */
const DATES = '__nestjsIdempotencyDates';
type DatePath = readonly (string | number)[];

/** A value stored by 0.4.0 with the paths of its `Date`s beside it, with its `Date`s restored. */
function withDates(stored: unknown): unknown {
  if (typeof stored !== 'object' || stored === null || !Array.isArray((stored as Record<string, unknown>)[DATES])) return stored;
  const { [DATES]: dates, value } = stored as { [DATES]: DatePath[]; value: unknown };
  for (const path of dates) {
    if (path.length === 0) {
      if (typeof value === 'string') return new Date(value);
      continue;
    }
    let parent: unknown = value;
    for (let i = 0; i < path.length - 1 && typeof parent === 'object' && parent !== null; i++) {
      parent = (parent as Record<string | number, unknown>)[path[i]];
    }
    const last = path[path.length - 1];
    if (typeof parent === 'object' && parent !== null && typeof (parent as Record<string | number, unknown>)[last] === 'string') {
      (parent as Record<string | number, unknown>)[last] = new Date((parent as Record<string | number, string>)[last]);
    }
  }
  return value;
}

/** `a`, or `a.0.b` for nested paths. */
function pathOf(path: ResponsePath): string {
  let out = String(path.key);
  for (let prev = path.prev; prev; prev = prev.prev) out = `${String(prev.key)}.${out}`;
  return out;
}
