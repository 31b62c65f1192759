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
}

/** The members of `request.auth` the principal is read from, in order (a JWT's `sub`, Auth0's `payload.sub`, basic auth's `user`). */
const AUTH_FIELDS = ['sub', 'payload.sub', 'user', 'id', 'userId'] as const;

/** Request headers that carry credentials: a request with one is not anonymous, whatever the app did with it. */
const CREDENTIAL_HEADERS = ['authorization', 'x-api-key'] as const;

/**
 * Who sent an HTTP request (or the HTTP request behind a GraphQL operation): the caller on
 * `request.user` and on `request.auth`, each typed and with its source (see
 * `IdempotencyPrincipal`); both when both are set. A request with neither is anonymous
 * only when it carries no credentials: with an `Authorization` or `X-API-Key` header, or
 * a session that holds a user, it is refused, since sharing the anonymous key space
 * would hand one signed-in caller another's answer.
 */
export function httpPrincipalOf(
  request: AuthenticatedRequestLike | undefined,
  what: string,
  scopeExample: string,
): IdempotencyPrincipal | undefined {
  if (!request) return undefined;
  const user = principalOfIdentity(request.user, 'user', what, scopeExample);
  const auth = request.auth === request.user ? undefined : principalOfIdentity(request.auth, 'auth', what, scopeExample, AUTH_FIELDS);
  if (user && auth) return IdempotencyPrincipal.all([user, auth]);
  const principal = user ?? auth;
  if (principal) return principal;
  const credentials = credentialsOf(request);
  if (credentials === undefined) return undefined;
  throw new IdempotencyConfigurationError(
    `@Idempotent() cannot tell who sent this ${what}: it carries credentials (${credentials}), but neither request.user nor request.auth identifies a caller, and treating it as anonymous would let one caller replay another's answer.`,
    `Put the authenticated caller on request.user (Passport and @nestjs/passport guards do), or tell the library who is asking: @Idempotent({ scope: ${scopeExample} }) or the same \`scope\` option in IdempotencyModule.forRoot(). For a public route whose credentials mean nothing to it, say so with scope: () => undefined.`,
  );
}

/** What marks a request as sent by someone: a credential header, or a session that holds a user. */
function credentialsOf(request: AuthenticatedRequestLike): string | undefined {
  const headers = request.headers ?? {};
  for (const name of CREDENTIAL_HEADERS) {
    const value = headers[name];
    if (value !== undefined && value !== '') return `an ${name === 'authorization' ? 'Authorization' : 'X-API-Key'} header`;
  }
  const session = request.session as { passport?: { user?: unknown }; user?: unknown; userId?: unknown } | undefined | null;
  if (typeof session === 'object' && session !== null && (isSet(session.passport?.user) || isSet(session.user) || isSet(session.userId))) {
    return 'a session that holds a user';
  }
  return undefined;
}

function isSet(value: unknown): boolean {
  return value !== undefined && value !== null && value !== false && value !== '';
}
