import { IdempotencyPrincipal } from '../../lib/index.js';
import { wsPrincipalOf } from '../../lib/nest/transports/ws/ws-principal.js';

/** Who sent a gateway message, read from the socket (lib/nest/transports/ws/ws-principal.ts). */
describe('wsPrincipalOf', () => {
  it('reads client.data.user, client.user and client.handshake.user with the source user, typed', () => {
    expect(wsPrincipalOf({ data: { user: { id: 7 } } })).toEqual(IdempotencyPrincipal.of('user.id', 7));
    expect(wsPrincipalOf({ user: { sub: 'alice' } })).toEqual(IdempotencyPrincipal.of('user.sub', 'alice'));
    expect(wsPrincipalOf({ handshake: { user: { id: 'alice' } } })).toEqual(IdempotencyPrincipal.of('user.id', 'alice'));
    // Passport on socket.io's engine (io.engine.use(passport.session())).
    expect(wsPrincipalOf({ request: { user: { id: 'alice' } } })).toEqual(IdempotencyPrincipal.of('user.id', 'alice'));
    // 7 and '7' are two callers.
    expect(String(wsPrincipalOf({ user: { id: 7 } }))).not.toBe(String(wsPrincipalOf({ user: { id: '7' } })));
  });

  it('takes one user set in several places; refuses two places naming different callers', () => {
    const user = { id: 'alice' };
    expect(wsPrincipalOf({ data: { user }, user })).toEqual(IdempotencyPrincipal.of('user.id', 'alice'));
    expect(wsPrincipalOf({ data: { user }, handshake: { user: { id: 'alice' } } })).toEqual(IdempotencyPrincipal.of('user.id', 'alice'));
    expect(() => wsPrincipalOf({ data: { user }, user: { id: 'bob' } })).toThrow(
      /client\.data\.user and client\.user identify different callers/,
    );
  });

  it('refuses a user whose id cannot be read, with the gateway hint', () => {
    expect(() => wsPrincipalOf({ data: { user: { name: 'no id' } } })).toThrow(
      expect.objectContaining({
        code: 'IDEMPOTENCY_CONFIGURATION_ERROR',
        message: expect.stringMatching(/client\.data\.user is set, but none of client\.data\.user\.id/),
        hint: expect.stringMatching(/client\.data\.user .* resolvePrincipal/),
      }),
    );
  });

  it.each([
    ['handshake.auth.token', { handshake: { auth: { token: 'jwt' } } }],
    ['an Authorization header', { handshake: { headers: { authorization: 'Bearer jwt' } } }],
    ['an X-API-Key header', { handshake: { headers: { 'x-api-key': 'k' } } }],
    ['handshake.query.token', { handshake: { query: { token: 'jwt' } } }],
    ['a session that holds a user', { handshake: {}, request: { session: { passport: { user: 'alice' } } } }],
  ])('refuses a handshake with %s and no user', (what, client) => {
    expect(() => wsPrincipalOf(client)).toThrow(expect.objectContaining({ message: expect.stringContaining(`credentials (${what})`) }));
  });

  it('is anonymous without a user or credentials; never reads an identity from what the client sent (handshake.auth)', () => {
    expect(wsPrincipalOf({})).toBeUndefined();
    expect(wsPrincipalOf({ data: {}, handshake: { auth: {}, headers: {}, query: {} } })).toBeUndefined();
    expect(wsPrincipalOf({ handshake: { auth: { user: { id: 'bob' } } } })).toBeUndefined();
    expect(wsPrincipalOf(undefined)).toBeUndefined();
  });
});
