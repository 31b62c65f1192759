import * as crypto from 'node:crypto';
import { IdempotencyRequestInvalidError } from './errors.js';

/** Deep enough for any sane payload, shallow enough that hostile nesting cannot blow the stack. */
const MAX_DEPTH = 256;

/**
 * JSON with object keys sorted, so that two payloads equal as data hash equal whatever
 * their key order. Buffers and typed arrays become base64, Dates ISO strings; object
 * members holding `undefined` are dropped like JSON.stringify does. Values JSON cannot
 * hold (`Infinity`, `NaN`, `-0`, bigints, `undefined` in an array) are written as bare
 * tokens that no JSON value produces, so they never collide with `null` or a string:
 * the output is hashed, never parsed.
 */
export function canonicalJson(value: unknown): string {
  // Built by concatenation (V8 ropes) with the open objects on a small array: this runs
  // on every request, and a parts array plus a Set per call cost more than the hashing.
  return write(value, 0, []);
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
  if (ArrayBuffer.isView(obj)) {
    return JSON.stringify('b64:' + Buffer.from(obj.buffer, obj.byteOffset, obj.byteLength).toString('base64'));
  }
  if (obj instanceof Date) {
    return JSON.stringify(Number.isNaN(obj.getTime()) ? null : obj.toISOString());
  }
  // Open objects are at most MAX_DEPTH deep and usually a handful: a linear scan beats a Set.
  if (stack.includes(obj)) throw new IdempotencyRequestInvalidError('payload contains a circular reference');
  let out: string;
  if (Array.isArray(obj)) {
    stack.push(obj);
    out = '[';
    for (let i = 0; i < obj.length; i++) {
      if (i > 0) out += ',';
      out += write(obj[i], depth + 1, stack);
    }
    out += ']';
  } else {
    if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
      const source = (obj as { toJSON(): unknown }).toJSON();
      if (source !== obj) return write(source, depth + 1, stack);
    }
    stack.push(obj);
    const keys = Object.keys(obj);
    if (keys.length > 1) keys.sort();
    out = '{';
    let first = true;
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      const member = (obj as Record<string, unknown>)[key];
      if (member === undefined || typeof member === 'function' || typeof member === 'symbol') continue;
      if (!first) out += ',';
      first = false;
      out += quote(key) + ':' + write(member, depth + 1, stack);
    }
    out += '}';
  }
  stack.pop();
  return out;
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
