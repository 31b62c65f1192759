import { IdempotencyConfigurationError, isIdempotencyError } from '../../../core/errors.js';
import { PRINCIPAL_FIELDS, principalOfIdentity, type IdempotencyPrincipal } from '../../principal.js';

/** The parts of a gateway's client (a socket.io `Socket`, a `ws` WebSocket) where Nest applications put an authenticated caller. */
export interface GatewayClientLike {
  /** socket.io's `socket.data` (never sent by the client), where middleware and guards put the user; `ws` apps use the same name. */
  data?: { user?: unknown } | null;
  /** A guard's `client.user = payload` (both adapters). */
  user?: unknown;
  /**
   * socket.io's handshake: `user` is where a Passport guard whose `getRequest()` returns the
   * handshake puts the caller; `auth`, `headers` and `query` are what the client sent.
   */
  handshake?: {
    user?: unknown;
    auth?: unknown;
    headers?: Record<string, string | string[] | undefined>;
    query?: Record<string, unknown>;
  } | null;
  /**
   * socket.io's `socket.request`, the handshake's HTTP request: Passport on the engine
   * (`io.engine.use(passport.session())`) puts the user there, express-session its session.
   */
  request?: { user?: unknown; session?: unknown } | null;
}

/** Where the principal is read, in order; each set place must name the same caller. */
const PLACES: ReadonlyArray<readonly [string, (client: GatewayClientLike) => unknown]> = [
  ['client.data.user', (client) => client.data?.user],
  ['client.user', (client) => client.user],
  ['client.handshake.user', (client) => client.handshake?.user],
  ['client.request.user', (client) => client.request?.user],
];

/** Handshake headers that carry credentials, as on HTTP. */
const CREDENTIAL_HEADERS = ['authorization', 'x-api-key'] as const;

/** How to tell the library who is asking on a gateway. */
const HINT =
  'Put the authenticated caller on client.data.user (socket.io middleware or a guard) or client.user (a guard on either adapter), ' +
  'as an object with an id, sub, userId or _id; or read the principal your own way by overriding resolvePrincipal in an ' +
  'IdempotencyRuntime subclass (IdempotencyModule.forRoot({ runtime })).';

function isSet(value: unknown): boolean {
  return value !== undefined && value !== null && value !== false && value !== '';
}

/**
 * Who sent a gateway message: the caller on `client.data.user`, `client.user`,
 * `client.handshake.user` (a Passport guard on the handshake) or `client.request.user`
 * (Passport on socket.io's engine), typed and with the source `user`, as on HTTP, so that
 * two sockets of one user (a reconnect is a new socket) share the key space and two users
 * never do. Several places set to different callers are refused; so is a handshake that
 * carries credentials (`auth.token`, `query.token`, an `Authorization` or `X-API-Key`
 * header, a session holding a user) while no place names a caller: treating it as
 * anonymous would let one caller replay another's answer.
 */
export function wsPrincipalOf(client: GatewayClientLike | undefined | null): IdempotencyPrincipal | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  let found: { principal: IdempotencyPrincipal; identity: unknown; where: string } | undefined;
  for (const [where, read] of PLACES) {
    const identity = read(client);
    if (identity === undefined || identity === null || identity === false || identity === found?.identity) continue;
    const principal = principalAt(identity, where);
    if (!principal) continue;
    if (!found) found = { principal, identity, where };
    else if (found.principal.identity !== principal.identity) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() cannot tell who sent this message: ${found.where} and ${where} identify different callers.`,
        HINT,
      );
    }
  }
  if (found) return found.principal;
  const credentials = credentialsOf(client);
  if (credentials === undefined) return undefined;
  throw new IdempotencyConfigurationError(
    `@Idempotent() cannot tell who sent this message: its connection's handshake carries credentials (${credentials}), but none of ${PLACES.map(([where]) => where).join(', ')} identifies a caller, and treating it as anonymous would let one caller replay another's answer.`,
    HINT,
  );
}

/** The typed principal of one place, its refusal (a set identity without a readable id) given the gateway's hint. */
function principalAt(identity: unknown, where: string): IdempotencyPrincipal | undefined {
  try {
    return principalOfIdentity(identity, 'user', 'message', '', PRINCIPAL_FIELDS, where);
  } catch (error) {
    if (isIdempotencyError(error)) throw new IdempotencyConfigurationError(error.message, HINT);
    throw error;
  }
}

/** What marks a socket.io handshake as sent by someone. */
function credentialsOf(client: GatewayClientLike): string | undefined {
  const handshake = client.handshake;
  if (typeof handshake !== 'object' || handshake === null) return undefined;
  const auth = handshake.auth as { token?: unknown } | undefined | null;
  if (typeof auth === 'object' && auth !== null && isSet(auth.token)) return 'handshake.auth.token';
  const headers = handshake.headers ?? {};
  for (const name of CREDENTIAL_HEADERS) {
    if (isSet(headers[name])) return `an ${name === 'authorization' ? 'Authorization' : 'X-API-Key'} header`;
  }
  if (isSet(handshake.query?.token)) return 'handshake.query.token';
  const session = client.request?.session as { passport?: { user?: unknown }; user?: unknown; userId?: unknown } | undefined | null;
  if (typeof session === 'object' && session !== null && (isSet(session.passport?.user) || isSet(session.user) || isSet(session.userId))) {
    return 'a session that holds a user';
  }
  return undefined;
}
