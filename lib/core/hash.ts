import * as crypto from 'node:crypto';
import { types } from 'node:util';
import { IdempotencyConfigurationError, IdempotencyRequestInvalidError } from './errors.js';
import { classWithPrivateState, ownToJSON, type PrivateStateHolder } from './private-state.js';

/** Deep enough for any sane payload, shallow enough that hostile nesting cannot blow the stack. */
const MAX_DEPTH = 256;

/**
 * JSON with object keys sorted, so that two payloads equal as data hash equal whatever
 * their key order; object members holding `undefined`, a function or a symbol are
 * dropped as JSON.stringify does. Everything JSON does not have is written as a bare
 * token that no JSON value produces, so it never collides with `null`, a string or an
 * object: `-0`, `NaN`, `Infinity`, bigints (`n10`), `undefined` in an array or at the
 * top (`undefined`), `Date("1970-01-01T00:00:00.000Z")`, `Uint8Array("aGk=")` (also
 * Buffers; each typed array by its name), `ArrayBuffer(...)`, `Map[[k,v],...]` and
 * `Set[...]` (entries sorted, so insertion order does not count, as with keys),
 * `RegExp("/a/g")`, `URLSearchParams("a=1")`, `Boxed(1)`, `Error("TypeError","msg",{...})`.
 * An object with `toJSON()` is written as what that returns, any other class instance as
 * its own enumerable fields; one without any (its state is in internal slots) is refused,
 * as it would fingerprint like every other instance. An instance whose class (or a class
 * it extends) keeps per-instance private state (`#private` fields, down-levelled or
 * WeakMap-held: see private-state.ts) is written as its `toJSON()` or refused: its
 * public fields, or the built-in it extends, do not say everything that tells it apart.
 * The output is hashed, never parsed. Plain JSON data (every HTTP JSON body) is written
 * exactly as before these tokens existed: stored fingerprints stay valid.
 */
export function canonicalJson(value: unknown): string {
  // Built by concatenation (V8 ropes) with the open objects on a small array: this runs
  // on every request, and a parts array plus a Set per call cost more than the hashing.
  return write(value, 0, []);
}

/**
 * Call arguments as fingerprint material: trailing `undefined` arguments are dropped,
 * so `f(x, undefined)` fingerprints as the call `f(x)` it is.
 */
export function withoutTrailingUndefined(args: readonly unknown[]): readonly unknown[] {
  let length = args.length;
  while (length > 0 && args[length - 1] === undefined) length--;
  return length === args.length ? args : args.slice(0, length);
}

function write(value: unknown, depth: number, stack: object[]): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return quote(value);
    case 'number':
      // Non-finite numbers and -0 are written as bare tokens no JSON value produces, so
      // `{"amount":1e999}` (parsed as Infinity) never fingerprints like `{"amount":null}`.
      if (Number.isFinite(value)) return value === 0 && 1 / value < 0 ? '-0' : String(value);
      return String(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'bigint':
      return 'n' + value.toString();
    case 'undefined':
    case 'function':
    case 'symbol':
      // Only reached at the top level and inside arrays (object members holding them are
      // dropped, as in JSON): `[undefined]` must not equal `[null]`.
      return 'undefined';
  }
  if (depth >= MAX_DEPTH) throw new IdempotencyRequestInvalidError(`payload nested deeper than ${MAX_DEPTH} levels`);
  const obj = value as object;
  // Open objects are at most MAX_DEPTH deep and usually a handful: a linear scan beats a Set.
  if (stack.includes(obj)) throw new IdempotencyRequestInvalidError('payload contains a circular reference');
  let out: string;
  if (Array.isArray(obj)) {
    // An Array subclass (rare; plain arrays pay one comparison) may keep private state.
    const holder = Object.getPrototypeOf(obj) === Array.prototype ? undefined : classWithPrivateState(obj);
    if (holder !== undefined) return writeOpaque(obj, holder, depth, stack);
    stack.push(obj);
    out = '[';
    for (let i = 0; i < obj.length; i++) {
      if (i > 0) out += ',';
      out += write(obj[i], depth + 1, stack);
    }
    out += ']';
  } else {
    const proto = Object.getPrototypeOf(obj) as object | null;
    // A plain object (of this realm or another: its prototype's prototype is null) is the
    // one shape of every JSON body; anything else is written by `writeSpecial`.
    if (proto !== null && Object.getPrototypeOf(proto) !== null) return writeSpecial(obj, depth, stack);
    if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
      const source = (obj as { toJSON(): unknown }).toJSON();
      if (source !== obj) return write(source, depth + 1, stack);
    }
    stack.push(obj);
    out = writeMembers(obj, depth, stack);
  }
  stack.pop();
  return out;
}

function writeMembers(obj: object, depth: number, stack: object[]): string {
  const keys = Object.keys(obj);
  if (keys.length > 1) keys.sort();
  let out = '{';
  let first = true;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const member = (obj as Record<string, unknown>)[key];
    if (member === undefined || typeof member === 'function' || typeof member === 'symbol') continue;
    if (!first) out += ',';
    first = false;
    out += quote(key) + ':' + write(member, depth + 1, stack);
  }
  return out + '}';
}

/** Bare tokens for what is not a plain object or array (see `canonicalJson`); `obj` is not on the stack yet. */
function writeSpecial(obj: object, depth: number, stack: object[]): string {
  const holder = classWithPrivateState(obj);
  if (holder !== undefined) return writeOpaque(obj, holder, depth, stack);
  if (ArrayBuffer.isView(obj)) {
    const type = Buffer.isBuffer(obj) ? 'Uint8Array' : Object.prototype.toString.call(obj).slice(8, -1);
    return type + '(' + JSON.stringify(Buffer.from(obj.buffer, obj.byteOffset, obj.byteLength).toString('base64')) + ')';
  }
  if (types.isArrayBuffer(obj) || types.isSharedArrayBuffer(obj)) {
    return 'ArrayBuffer(' + JSON.stringify(Buffer.from(obj as ArrayBuffer).toString('base64')) + ')';
  }
  if (types.isDate(obj)) {
    const time = (obj as Date).getTime();
    return 'Date(' + (Number.isNaN(time) ? 'null' : quote((obj as Date).toISOString())) + ')';
  }
  if (types.isRegExp(obj)) return 'RegExp(' + quote(String(obj)) + ')';
  if (obj instanceof URLSearchParams) return 'URLSearchParams(' + quote(obj.toString()) + ')';
  if (types.isBoxedPrimitive(obj)) return 'Boxed(' + write((obj as { valueOf(): unknown }).valueOf(), depth + 1, stack) + ')';
  stack.push(obj);
  let out: string;
  if (types.isMap(obj)) {
    const entries: string[] = [];
    for (const [key, member] of obj as Map<unknown, unknown>) {
      entries.push('[' + write(key, depth + 1, stack) + ',' + write(member, depth + 1, stack) + ']');
    }
    out = 'Map[' + entries.sort().join(',') + ']';
  } else if (types.isSet(obj)) {
    const members: string[] = [];
    for (const member of obj as Set<unknown>) members.push(write(member, depth + 1, stack));
    out = 'Set[' + members.sort().join(',') + ']';
  } else if (types.isNativeError(obj) || obj instanceof Error) {
    const error = obj as Error;
    out = 'Error(' + quote(String(error.name)) + ',' + quote(String(error.message)) + ',' + writeMembers(error, depth, stack) + ')';
  } else if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
    stack.pop();
    return write((obj as { toJSON(): unknown }).toJSON(), depth + 1, stack);
  } else if (Object.keys(obj).length > 0) {
    // A class instance: its fields, exactly as a plain object with them (as before).
    out = writeMembers(obj, depth, stack);
  } else {
    const name = (obj.constructor as { name?: string } | undefined)?.name || 'an anonymous class';
    throw new IdempotencyConfigurationError(
      `The fingerprint cannot see inside this instance of ${name}: it has no own enumerable fields and no toJSON() ` +
        '(its state is in #private fields or internal slots), so every instance would fingerprint alike.',
      `Pass plain data, give ${name} a toJSON() that returns what identifies it, or set the fingerprint option to that data.`,
    );
  }
  stack.pop();
  return out;
}

/**
 * An instance whose class keeps private state: what its `toJSON()` returns (the class's
 * own word on what identifies it: defined at or below the class that keeps the state, see
 * `ownToJSON`), else refused. Not `valueOf()`: a conversion for arithmetic says nothing
 * of the rest (a Money's valueOf() is its amount, not its currency).
 */
function writeOpaque(obj: object, holder: PrivateStateHolder, depth: number, stack: object[]): string {
  const toJSON = ownToJSON(obj, holder);
  if (toJSON !== undefined) {
    const json = toJSON.call(obj);
    if (json !== obj) return write(json, depth + 1, stack);
  }
  const name = (obj.constructor as { name?: string } | undefined)?.name || holder.name;
  throw new IdempotencyConfigurationError(
    `The fingerprint cannot see inside this instance of ${name}: ` +
      (name === holder.name ? `${name} keeps` : `it extends ${holder.name}, which keeps`) +
      ' state in #private fields (or a WeakMap) and no toJSON() of its own says what identifies it, so instances that' +
      ' differ only there would fingerprint alike and one would get the answer stored for the other.',
    `Give ${name} a toJSON() that returns everything that identifies it, pass plain data, or set the fingerprint option to that data.`,
  );
}

/** Characters JSON.stringify escapes in a string (quotes, backslash, controls) or may (lone surrogates). */
// eslint-disable-next-line no-control-regex -- the control characters are what it looks for
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * `JSON.stringify(text)`, without its call for the short plain strings that make up
 * most keys and values of a request (a regular expression test is cheaper than that
 * call). The output is the same character for character.
 */
function quote(text: string): string {
  return text.length <= 64 && !NEEDS_ESCAPE.test(text) ? '"' + text + '"' : JSON.stringify(text);
}

/** One-shot hashing (Node 20.12+), without a Hash object per call; createHash before that. */
const oneShotHash = (crypto as { hash?: (algorithm: string, data: string, outputEncoding: 'base64url') => string }).hash;

export function sha256(input: string): string {
  return oneShotHash ? oneShotHash('sha256', input, 'base64url') : crypto.createHash('sha256').update(input).digest('base64url');
}

/** The fingerprint of a request: SHA-256 of its canonical JSON. */
export function fingerprintOf(material: unknown): string {
  return sha256(canonicalJson(material));
}

/**
 * The store key for a client key within a scope. Hashing both keeps raw client input
 * (glob characters, braces that would act as Redis Cluster hash tags, CRLF) out of
 * every store, and makes keys of different scopes disjoint by construction.
 */
export function storageKeyOf(scope: string, clientKey: string): string {
  return sha256(scope + '\u0000' + clientKey);
}
