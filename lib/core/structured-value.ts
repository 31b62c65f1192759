import { types } from 'node:util';
import { setOwn } from './structured-value-decode.js';

/**
 * The faithful value encoding of in-process entry points (service methods, BullMQ,
 * events, schedules, `makeIdempotent`, `IdempotencyService.run`, idempotent
 * transactions): a replay returns a copy of at least what `structuredClone` keeps.
 * Transports that put the answer on a wire as JSON (HTTP, RPC, GraphQL) keep storing
 * the JSON the client received and never use this.
 *
 * Why tagged JSON, and not `v8.serialize` or a serializer package:
 * - A value JSON can carry exactly (the usual case) is stored as it always was, as the
 *   `j` tag: records stay readable in `redis-cli` and SQL, old records decode as before,
 *   and a replay of such a value costs nothing more (no walk on decode).
 * - `v8.serialize` writes V8's own binary format, whose version moves with Node: a
 *   record written by a newer Node is refused by an older one, which happens whenever
 *   a rolling upgrade shares one store; and its base64 would be opaque in the store.
 * - The package has no runtime dependencies; superjson or devalue would be the first.
 *
 * The encoding (`s` tag): JSON, where every value JSON cannot carry is an object whose
 * `$` member names it: `{"$":"D","v":0}` is `new Date(0)`. A plain object that has a
 * `$` member of its own is escaped as `{"$":"o","v":{...}}`, so no data is ever read as
 * a tag. A value met a second time (a shared or a cyclic reference) is `{"$":"r","v":n}`,
 * the n-th object met in encoding order, so shapes and cycles come back as they were.
 *
 * What comes back: primitives (also `undefined`, `NaN`, `±Infinity`, `-0`, bigints),
 * arrays (with their holes), plain objects (also their `undefined` members), `Date`,
 * `RegExp` (without `lastIndex`), `Map`, `Set`, `Buffer` as `Buffer`, typed arrays,
 * `DataView` and `ArrayBuffer` (a copy of the viewed bytes), boxed primitives, errors
 * (standard class by name, else `Error` with the name; message, stack, cause and own
 * enumerable properties). An object with a `toJSON()` method comes back as what that
 * returns, as in JSON. Any other class instance comes back as a plain object of its own
 * enumerable fields: prototype, getters and methods are not kept.
 * Refused (reported as not storable on the first call, so a replay answers
 * `IdempotencyNotReplayableError` instead of something else): functions, symbols,
 * Promises and thenables, streams, Observables, WeakMap / WeakSet / WeakRef, and class
 * instances without own enumerable fields and without `toJSON()` (their state lives in
 * `#private` fields or internal slots, and would replay as `{}`).
 */

/** Deeper than any sane result, shallow enough that the recursion cannot exhaust the stack. */
const MAX_DEPTH = 2000;

/** A value the faithful encoding refuses; `reason` says what and where. */
export class NotStorableValue extends Error {
  private readonly path: string[] = [];
  constructor(private readonly what: string) {
    super(what);
  }

  /** @internal Adds the member the refused value was found under (called innermost first). */
  under(member: string | number): this {
    return this.within(
      typeof member === 'number' ? `[${member}]` : /^[A-Za-z_$][\w$]*$/.test(member) ? `.${member}` : `[${JSON.stringify(member)}]`,
    );
  }

  /** @internal Adds a step of the path as written, e.g. ` (Map entry 2)`. */
  within(step: string): this {
    this.path.push(step);
    return this;
  }

  /** For the `response_not_storable` event and `IdempotencyNotReplayableError`. */
  get reason(): string {
    const at = this.path.length === 0 ? '' : ` at ${[...this.path].reverse().join('')}`;
    return `the result holds ${this.what}${at}, which a replay could not return; return data instead`;
  }
}

interface EncodeState {
  /** Objects met so far and their order: a second meeting is a reference. */
  readonly seen: Map<object, number>;
  next: number;
  /** True once any tag was written: the decoder must walk the value. */
  tagged: boolean;
}

const UNDEFINED = { $: 'u' } as const;
const HOLE = { $: 'h' } as const;

/**
 * The encoded form of `value`, and whether it carries tags. Untagged output is plain
 * JSON data equal to the value (often the value itself, nothing copied). Throws
 * `NotStorableValue` for what cannot be replayed.
 */
export function encodeStructured(value: unknown): { readonly tagged: boolean; readonly value: unknown } {
  const state: EncodeState = { seen: new Map(), next: 0, tagged: false };
  const encoded = encode(state, value, 0);
  return { tagged: state.tagged, value: encoded };
}

function encode(state: EncodeState, value: unknown, depth: number): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (Number.isFinite(value) && !(value === 0 && 1 / value < 0)) return value;
      state.tagged = true;
      return { $: 'N', v: value === 0 ? '-0' : String(value) };
    case 'undefined':
      state.tagged = true;
      return UNDEFINED;
    case 'bigint':
      state.tagged = true;
      return { $: 'I', v: value.toString() };
    case 'function':
      throw new NotStorableValue('a function');
    case 'symbol':
      throw new NotStorableValue('a symbol');
  }
  if (value === null) return null;
  const obj = value as object;
  const ref = state.seen.get(obj);
  if (ref !== undefined) {
    state.tagged = true;
    return { $: 'r', v: ref };
  }
  if (depth >= MAX_DEPTH) throw new NotStorableValue(`a value nested deeper than ${MAX_DEPTH} levels`);
  if (Array.isArray(obj)) {
    state.seen.set(obj, state.next++);
    return encodeArray(state, obj, depth);
  }
  const proto = Object.getPrototypeOf(obj) as object | null;
  // A plain object of this realm or another (Jest's, a vm context's): its prototype's is null.
  if (proto === null || Object.getPrototypeOf(proto) === null) {
    state.seen.set(obj, state.next++);
    const members = encodeMembers(state, obj, depth, false);
    if (!Object.prototype.hasOwnProperty.call(obj, '$')) return members;
    state.tagged = true;
    return { $: 'o', v: members };
  }
  return encodeSpecial(state, obj, depth);
}

function encodeArray(state: EncodeState, array: unknown[], depth: number): unknown[] {
  let copy: unknown[] | undefined;
  for (let i = 0; i < array.length; i++) {
    const member = array[i];
    let encoded: unknown;
    if (member === undefined && !(i in array)) {
      state.tagged = true;
      encoded = HOLE;
    } else {
      try {
        encoded = encode(state, member, depth + 1);
      } catch (error) {
        throw error instanceof NotStorableValue ? error.under(i) : error;
      }
    }
    if (encoded !== member && copy === undefined) copy = array.slice(0, i);
    if (copy !== undefined) copy.push(encoded);
  }
  return copy ?? array;
}

/** Own enumerable string-keyed members, encoded; `obj` itself when none changed and `copy` is false. */
function encodeMembers(state: EncodeState, obj: object, depth: number, copy: boolean): object {
  const source = obj as Record<string, unknown>;
  const keys = Object.keys(obj);
  let out: Record<string, unknown> | undefined = copy ? {} : undefined;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const member = source[key];
    let encoded: unknown;
    try {
      encoded = encode(state, member, depth + 1);
    } catch (error) {
      throw error instanceof NotStorableValue ? error.under(key) : error;
    }
    if (encoded !== member && out === undefined) {
      out = {};
      for (let j = 0; j < i; j++) setOwn(out, keys[j], source[keys[j]]);
    }
    if (out !== undefined) setOwn(out, key, encoded);
  }
  return out ?? obj;
}

function bytesOf(view: ArrayBufferView | ArrayBufferLike): string {
  return ArrayBuffer.isView(view)
    ? Buffer.from(view.buffer, view.byteOffset, view.byteLength).toString('base64')
    : Buffer.from(view).toString('base64');
}

/** Everything that is neither an array nor a plain object. */
function encodeSpecial(state: EncodeState, obj: object, depth: number): unknown {
  const register = () => {
    state.seen.set(obj, state.next++);
    state.tagged = true;
  };
  if (ArrayBuffer.isView(obj)) {
    register();
    if (Buffer.isBuffer(obj)) return { $: 'B', v: bytesOf(obj) };
    return { $: 'T', c: Object.prototype.toString.call(obj).slice(8, -1), v: bytesOf(obj) };
  }
  if (types.isArrayBuffer(obj) || types.isSharedArrayBuffer(obj)) {
    register();
    return { $: 'A', v: bytesOf(obj) };
  }
  if (types.isDate(obj)) {
    register();
    const time = (obj as Date).getTime();
    return { $: 'D', v: Number.isNaN(time) ? null : time };
  }
  if (types.isRegExp(obj)) {
    register();
    return { $: 'R', s: (obj as RegExp).source, f: (obj as RegExp).flags };
  }
  if (types.isMap(obj)) {
    register();
    const entries: unknown[] = [];
    let i = 0;
    for (const [key, member] of obj as Map<unknown, unknown>) {
      try {
        const encodedKey = encode(state, key, depth + 1);
        entries.push([encodedKey, encode(state, member, depth + 1)]);
      } catch (error) {
        throw error instanceof NotStorableValue ? error.within(`<Map entry ${i}>`) : error;
      }
      i++;
    }
    return { $: 'M', v: entries };
  }
  if (types.isSet(obj)) {
    register();
    const members: unknown[] = [];
    let i = 0;
    for (const member of obj as Set<unknown>) {
      try {
        members.push(encode(state, member, depth + 1));
      } catch (error) {
        throw error instanceof NotStorableValue ? error.within(`<Set member ${i}>`) : error;
      }
      i++;
    }
    return { $: 'S', v: members };
  }
  if (types.isNativeError(obj) || obj instanceof Error) {
    register();
    const error = obj as Error;
    const encoded: Record<string, unknown> = { $: 'E', n: error.name, m: error.message, s: error.stack };
    // Cause before the other members: the decoder meets them in this order.
    if ('cause' in error) encoded.c = encodeUnder(state, error.cause, depth, 'cause');
    if (Object.keys(error).length > 0) encoded.p = encodeMembers(state, error, depth, true);
    return encoded;
  }
  if (types.isBoxedPrimitive(obj)) {
    if (types.isSymbolObject(obj)) throw new NotStorableValue('a boxed symbol');
    register();
    return { $: 'X', v: encode(state, unbox(obj), depth + 1) };
  }
  const refused = refusedKind(obj);
  if (refused) throw new NotStorableValue(refused);
  const toJSON = (obj as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    // Its declared data form, as in JSON (Decimal, Luxon, ObjectId, URL). Not registered:
    // each call builds a fresh value, which is registered when it is an object.
    return encode(state, toJSON.call(obj, ''), depth + 1);
  }
  if (Object.keys(obj).length === 0) {
    throw new NotStorableValue(
      `an instance of ${obj.constructor?.name || 'a class'} without own enumerable fields and without toJSON() ` +
        '(its state is in #private fields or internal slots, so it would replay as {})',
    );
  }
  // A class instance: its own enumerable fields, as a plain object (structuredClone's rule).
  state.seen.set(obj, state.next++);
  return encodeMembers(state, obj, depth, true);
}

function encodeUnder(state: EncodeState, value: unknown, depth: number, member: string): unknown {
  try {
    return encode(state, value, depth + 1);
  } catch (error) {
    throw error instanceof NotStorableValue ? error.under(member) : error;
  }
}

function unbox(obj: object): unknown {
  if (types.isNumberObject(obj)) return Number.prototype.valueOf.call(obj);
  if (types.isStringObject(obj)) return String.prototype.valueOf.call(obj);
  if (types.isBooleanObject(obj)) return Boolean.prototype.valueOf.call(obj);
  return BigInt.prototype.valueOf.call(obj);
}

/** What no copy can stand for: a live handle, not data. */
function refusedKind(obj: object): string | undefined {
  const o = obj as { then?: unknown; pipe?: unknown; on?: unknown; getStream?: unknown; subscribe?: unknown };
  if (types.isPromise(obj) || typeof o.then === 'function') return 'a Promise';
  // Both methods, so that an entity with a subscribe() or pipe() method of its own is still data.
  if (typeof o.subscribe === 'function' && typeof o.pipe === 'function') return 'an Observable';
  if (typeof o.pipe === 'function' && typeof o.on === 'function') return 'a stream';
  if (typeof o.getStream === 'function') return 'a StreamableFile';
  if (types.isWeakMap(obj)) return 'a WeakMap';
  if (types.isWeakSet(obj)) return 'a WeakSet';
  if (typeof WeakRef === 'function' && obj instanceof WeakRef) return 'a WeakRef';
  if (types.isGeneratorObject(obj)) return 'a generator';
  return undefined;
}
