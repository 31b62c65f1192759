import { IdempotencyConfigurationError } from '../../../core/errors.js';
import { IdempotencyPrincipal, principalOfIdentity } from '../../principal.js';

/** The parts of an Express or Fastify request where the ecosystem puts an authenticated caller. */
export interface AuthenticatedRequestLike {
  headers?: Record<string, string | string[] | undefined>;
  /** Passport, `@nestjs/passport`, `@fastify/jwt` and most hand-written guards. */
  user?: unknown;
  /** express-jwt (the verified payload), Auth0's express-oauth2-jwt-bearer (`{ payload, header, token }`), express-basic-auth (`{ user }`). */
  auth?: unknown;
  /** express-session / @fastify/session. */
  session?: unknown;
  /** Guards of the `@CurrentUser()` recipe that keep the caller apart from Passport's `request.user`. */
  currentUser?: unknown;
}

/** The members of `request.auth` the principal is read from, in order (a JWT's `sub`, Auth0's `payload.sub`, basic auth's `user`). */
const AUTH_FIELDS = ['sub', 'payload.sub', 'user', 'id', 'userId'] as const;

/** Request headers that carry credentials: a request with one is not anonymous, whatever the app did with it. */
const CREDENTIAL_HEADERS = ['authorization', 'x-api-key', 'x-access-token', 'x-auth-token'] as const;

/** Cookies that carry a token by name (the session cookie is not one: anonymous visitors get it too; a session is read for its user instead). */
const CREDENTIAL_COOKIE = /(?:^|;\s*)(?:access[_-]?token|id[_-]?token|auth[_-]?token|jwt|token)=[^;\s]/i;

/**
 * Who sent an HTTP request (or the HTTP request behind a GraphQL operation): the caller on
 * `request.user` and on `request.auth`, each typed and with its source (see
 * `IdempotencyPrincipal`); both when both are set. A request with neither is anonymous
 * only when it carries no credentials, or when an authentication layer said so (`null` or
 * `false` on `request.user`): with an `Authorization`, `X-API-Key`, `X-Access-Token` or
 * `X-Auth-Token` header, a token cookie (`access_token`, `jwt`, `token`, ...), or a session
 * that holds a user, it is refused, since sharing the anonymous key space would hand one
 * signed-in caller another's answer. `request.currentUser` counts as a caller too.
 */
export function httpPrincipalOf(
  request: AuthenticatedRequestLike | undefined,
  what: string,
  scopeExample: string,
): IdempotencyPrincipal | undefined {
  if (!request) return undefined;
  const user = principalOfIdentity(request.user, 'user', what, scopeExample);
  const auth = request.auth === request.user ? undefined : principalOfIdentity(request.auth, 'auth', what, scopeExample, AUTH_FIELDS);
  const current =
    request.currentUser === undefined || request.currentUser === request.user
      ? undefined
      : principalOfIdentity(request.currentUser, 'currentUser', what, scopeExample);
  const found = [user, auth, current].filter((principal): principal is IdempotencyPrincipal => principal !== undefined);
  if (found.length > 0) return IdempotencyPrincipal.all(found);
  // An authentication layer that ran and said "nobody" (an optional JWT guard's null, Passport's false) made the request anonymous.
  if (decidedAnonymous(request, 'user') || decidedAnonymous(request, 'auth') || decidedAnonymous(request, 'currentUser')) return undefined;
  const credentials = credentialsOf(request);
  if (credentials === undefined) return undefined;
  throw new IdempotencyConfigurationError(
    `@Idempotent() cannot tell who sent this ${what}: it carries credentials (${credentials}), but neither request.user nor request.auth identifies a caller, and treating it as anonymous would let one caller replay another's answer.`,
    `Put the authenticated caller on request.user (Passport and @nestjs/passport guards do; an optional guard sets null for "nobody"), or tell the library who is asking: @Idempotent({ scope: ${scopeExample} }) or the same \`scope\` option in IdempotencyModule.forRoot(). For a public route whose credentials mean nothing to it, say so with scope: () => undefined.`,
  );
}

/**
 * `null` or `false` set on the request itself: a default on the prototype (`@fastify/jwt`
 * decorates every request with `user: null`, verified or not) is no decision.
 */
function decidedAnonymous(request: AuthenticatedRequestLike, member: 'user' | 'auth' | 'currentUser'): boolean {
  const value = request[member];
  return (value === null || value === false) && Object.prototype.hasOwnProperty.call(request, member);
}

/** What marks a request as sent by someone: a credential header, or a session that holds a user. */
function credentialsOf(request: AuthenticatedRequestLike): string | undefined {
  const headers = request.headers ?? {};
  for (const name of CREDENTIAL_HEADERS) {
    const value = headers[name];
    if (value !== undefined && value !== '') return `a ${name} header`;
  }
  const cookie = headers.cookie;
  if (typeof cookie === 'string' && CREDENTIAL_COOKIE.test(cookie)) return 'a token cookie';
  const session = request.session as { passport?: { user?: unknown }; user?: unknown; userId?: unknown } | undefined | null;
  if (typeof session === 'object' && session !== null && (isSet(session.passport?.user) || isSet(session.user) || isSet(session.userId))) {
    return 'a session that holds a user';
  }
  return undefined;
}

function isSet(value: unknown): boolean {
  return value !== undefined && value !== null && value !== false && value !== '';
}
