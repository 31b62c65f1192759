import { IdempotencyConfigurationError } from '../core/index.js';

/**
 * A usable identity: a non-empty string, a finite number, a bigint, bytes (a Buffer or
 * typed array, as hex: decoding them as text would merge ids that differ only in bytes
 * invalid in UTF-8), or an id object (`toHexString()` as MongoDB's ObjectId has, or a
 * `toString()` of its own). Undefined when the value identifies nobody.
 */
export function identityOf(value: unknown): string | number | undefined {
  switch (typeof value) {
    case 'string':
      return value.length > 0 ? value : undefined;
    case 'number':
      return Number.isFinite(value) ? value : undefined;
    case 'bigint':
      return value.toString();
    case 'object': {
      if (value === null || Array.isArray(value)) return undefined;
      if (ArrayBuffer.isView(value)) {
        return value.byteLength > 0 ? 'hex:' + Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex') : undefined;
      }
      const id = value as { toHexString?: unknown; toString?: unknown };
      if (typeof id.toHexString === 'function') return identityOf((id.toHexString as () => unknown).call(value));
      // Only a toString of its own (or its class's): Object.prototype's gives "[object Object]" for everyone.
      if (typeof id.toString === 'function' && id.toString !== Object.prototype.toString) {
        return identityOf((id.toString as () => unknown).call(value));
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

/**
 * The principal a `scope` option (or an overridden `resolvePrincipal`) returned, as the
 * scope uses it. `undefined` / `null` mean anonymous; anything else must identify
 * someone, or the request is refused: `String({})` would put every tenant in one
 * `'[object Object]'` key space.
 */
export function principalOf(value: unknown, where: string): string | number | undefined {
  if (value === undefined || value === null) return undefined;
  const id = identityOf(value);
  if (id !== undefined) return id;
  throw new IdempotencyConfigurationError(
    `${where}: the scope option returned ${describe(value)}, which identifies nobody.`,
    'Return a string or number that identifies the principal (e.g. user.tenantId, not the user or tenant object), or undefined for anonymous requests.',
  );
}

/** The members of `request.user` the default principal is read from, in order. */
const PRINCIPAL_FIELDS = ['id', 'sub', 'userId', '_id'] as const;

/**
 * The default principal of an HTTP request (or of the HTTP request behind a GraphQL
 * operation): `request.user.id`, `.sub`, `.userId` or `._id`. Without `request.user`
 * the request is anonymous; a user whose identity cannot be read is refused, because
 * treating it as anonymous would let one user replay another's response.
 * `scopeExample` shows the `scope` option that reads the principal on this transport;
 * `source` names where `user` was read, for the refusal.
 */
export function principalOfUser(user: unknown, what: string, scopeExample: string, source = 'request.user'): string | number | undefined {
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
    `@Idempotent() cannot tell who sent this ${what}: ${source} is set, but none of ${PRINCIPAL_FIELDS.map((f) => `user.${f}`).join(', ')} holds an identity (a string, a number or an id object).`,
    `Tell it how to read the principal: @Idempotent({ scope: ${scopeExample} }) or the same \`scope\` option in IdempotencyModule.forRoot().`,
  );
}

function describe(value: unknown): string {
  if (typeof value === 'string') return 'an empty string';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object without an id';
  return `${typeof value} ${String(value)}`;
}
