import { IdempotencyConfigurationError } from '../core/index.js';

/**
 * A usable identity, typed: `number:7`, `string:7`, `bigint:7`, `bytes:0a0b` (a Buffer or
 * typed array as hex: decoding them as text would merge ids that differ only in bytes
 * invalid in UTF-8), `object-id:...` (`toHexString()`, as MongoDB's ObjectId has) or
 * `id:...` (an object with a `toString()` of its own). The type is part of the identity:
 * an API client `7` and an end user `'7'` are two callers. Undefined when the value
 * identifies nobody.
 */
export function typedIdentityOf(value: unknown): string | undefined {
  switch (typeof value) {
    case 'string':
      return value.length > 0 ? 'string:' + value : undefined;
    case 'number':
      return Number.isFinite(value) ? 'number:' + String(value) : undefined;
    case 'bigint':
      return 'bigint:' + value.toString();
    case 'object': {
      if (value === null || Array.isArray(value)) return undefined;
      if (ArrayBuffer.isView(value)) {
        return value.byteLength > 0 ? 'bytes:' + Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex') : undefined;
      }
      const id = value as { toHexString?: unknown; toString?: unknown };
      if (typeof id.toHexString === 'function') return textIdentity('object-id:', (id.toHexString as () => unknown).call(value));
      // Only a toString of its own (or its class's): Object.prototype's gives "[object Object]" for everyone.
      if (typeof id.toString === 'function' && id.toString !== Object.prototype.toString) {
        return textIdentity('id:', (id.toString as () => unknown).call(value));
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

function textIdentity(prefix: string, text: unknown): string | undefined {
  return typeof text === 'string' && text.length > 0 ? prefix + text : undefined;
}

/**
 * Who is asking, as the scope of a key uses it: where the identity was read (`user.id`,
 * `auth.sub`, `scope`, or a kind you name) and the identity with its type. Two principals
 * meet in one key space only when both the source and the typed identity are equal, so an
 * API client `{ id: 7 }` and an end user `{ sub: '7' }` never share a record.
 *
 * Return one from the `scope` option to name the kind of caller yourself:
 * `scope: (ctx) => IdempotencyPrincipal.of('api-client', req.apiClient.id)`; give one to
 * `IdempotencyService`'s record locator to find a record of the default principal:
 * `IdempotencyPrincipal.of('user.id', 7)`.
 */
export class IdempotencyPrincipal {
  private constructor(
    /** Where the identity was read, or the kind of caller you named. */
    readonly source: string,
    /** The typed identity: `number:7`, `string:alice`, ... */
    readonly identity: string,
  ) {}

  /**
   * The principal `id` read from `source`. Throws `IdempotencyConfigurationError` when `id`
   * identifies nobody (an empty string, an object without an id, `NaN`): a principal that
   * stands for everyone is the one mistake this type exists to refuse.
   */
  static of(source: string, id: unknown): IdempotencyPrincipal {
    if (typeof source !== 'string' || source.length === 0) {
      throw new IdempotencyConfigurationError(
        'IdempotencyPrincipal.of(source, id): source must be a non-empty string.',
        "Name where the id comes from or the kind of caller, e.g. 'api-client'.",
      );
    }
    const identity = typedIdentityOf(id);
    if (identity === undefined) {
      throw new IdempotencyConfigurationError(
        `IdempotencyPrincipal.of('${source}', id): ${describe(id)} identifies nobody.`,
        'Pass a non-empty string, a finite number, a bigint, bytes or an id object (toHexString() or a toString() of its own).',
      );
    }
    return new IdempotencyPrincipal(source, identity);
  }

  /** @internal a principal known to identify someone. */
  static typed(source: string, identity: string): IdempotencyPrincipal {
    return new IdempotencyPrincipal(source, identity);
  }

  /** Several identities of one request (e.g. `request.user` and `request.auth`), all part of the scope. */
  static all(principals: readonly IdempotencyPrincipal[]): IdempotencyPrincipal | undefined {
    if (principals.length <= 1) return principals[0];
    return new IdempotencyPrincipal(principals.map((p) => p.source).join('+'), principals.map((p) => p.toString()).join('\u0000'));
  }

  /** What the scope holds: source and typed identity. */
  toString(): string {
    return this.source + '\u0001' + this.identity;
  }
}

/** What a `scope` option or a `resolvePrincipal` hook returns: a typed principal, a string or number (source `scope`), or nothing (anonymous). */
export type PrincipalResult = IdempotencyPrincipal | string | number | undefined | null;

/**
 * The principal a `scope` option (or an overridden `resolvePrincipal`) returned, as the
 * scope uses it. `undefined` / `null` mean anonymous; an `IdempotencyPrincipal` is used as
 * it is; a string, number or id object becomes the principal of source `scope`, typed
 * (`7` and `'7'` are two principals); anything else must identify someone, or the request
 * is refused: `String({})` would put every tenant in one `'[object Object]'` key space.
 */
export function principalOf(value: unknown, where: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (value instanceof IdempotencyPrincipal) return value.toString();
  const identity = typedIdentityOf(value);
  if (identity !== undefined) return IdempotencyPrincipal.typed('scope', identity).toString();
  throw new IdempotencyConfigurationError(
    `${where}: the scope option returned ${describe(value)}, which identifies nobody.`,
    "Return a string or number that identifies the principal (e.g. user.tenantId, not the user or tenant object), IdempotencyPrincipal.of('kind', id) to name the kind of caller, or undefined for anonymous requests.",
  );
}

/** The members of a user object the default principal is read from, in order. */
export const PRINCIPAL_FIELDS = ['id', 'sub', 'userId', '_id'] as const;

/** Members beside the id that qualify it: who issued it (OIDC: only `iss` + `sub` identify a user) and the tenant it is local to. */
const QUALIFIERS = ['iss', 'tid', 'tenantId', 'tenant_id'] as const;

/**
 * The principal of an authenticated identity object (`request.user`, the GraphQL
 * context's `user`, `request.auth`): its first of `fields` that identifies someone, with
 * the source it was read from (`user.id`), qualified by the issuer and tenant beside it
 * (`iss`, `tid`, `tenantId`: a `sub` is unique only per issuer, an id often only per
 * tenant). Undefined when nothing is set; a set identity whose id cannot be read is
 * refused, because treating it as anonymous would let one caller replay another's
 * response. `scopeExample` shows the `scope` option that reads the principal on this
 * transport; `source` names where it was read in the principal, `where` in the refusal.
 * The identity object's class is not part of it: a class is a name (two modules may both
 * have a `User`, a minifier renames it) and may change under one caller (an entity whose
 * subclass changes with its state), which would make a retry miss its own record.
 */
export function principalOfIdentity(
  identity: unknown,
  source: string,
  what: string,
  scopeExample: string,
  fields: readonly string[] = PRINCIPAL_FIELDS,
  where = `request.${source}`,
): IdempotencyPrincipal | undefined {
  if (identity === undefined || identity === null || identity === false) return undefined;
  if (typeof identity === 'object' && !ArrayBuffer.isView(identity)) {
    for (const field of fields) {
      const id = typedIdentityOf(readPath(identity, field));
      if (id !== undefined) return IdempotencyPrincipal.typed(`${source}.${field}`, id + qualifiersOf(identity, field));
    }
  } else {
    const id = typedIdentityOf(identity);
    if (id !== undefined) return IdempotencyPrincipal.typed(source, id);
  }
  throw new IdempotencyConfigurationError(
    `@Idempotent() cannot tell who sent this ${what}: ${where} is set, but none of ${fields.map((f) => `${where}.${f}`).join(', ')} holds an identity (a string, a number or an id object).`,
    `Tell it how to read the principal: @Idempotent({ scope: ${scopeExample} }) or the same \`scope\` option in IdempotencyModule.forRoot().`,
  );
}

/** The qualifiers beside the id's field (on the object holding it: `payload` for `payload.sub`), typed: `\u0002iss=string:https://idp`. */
function qualifiersOf(identity: object, field: string): string {
  const dot = field.lastIndexOf('.');
  const holder = dot < 0 ? identity : readPath(identity, field.slice(0, dot));
  if (typeof holder !== 'object' || holder === null) return '';
  let text = '';
  for (const name of QUALIFIERS) {
    const value = typedIdentityOf((holder as Record<string, unknown>)[name]);
    if (value !== undefined) text += `\u0002${name}=${value}`;
  }
  return text;
}

/** `a.b` read through plain members. */
function readPath(object: object, path: string): unknown {
  let value: unknown = object;
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return 'an empty string';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object without an id';
  return `${typeof value} ${String(value)}`;
}
