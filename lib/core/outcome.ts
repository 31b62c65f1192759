import { decodeStructured } from './structured-value-decode.js';
import { errorChainOf, errorPrototypeFor, type ErrorClass } from './cached-errors.js';
import { NotStorableValue, encodeStructured } from './structured-value.js';

/**
 * What a completed record replays, serialized to the opaque `result` string stores keep.
 * `j`: JSON data; `u`: `undefined`; `b`: a top-level `Buffer` (base64); `s`: the faithful
 * encoding of structured-value.ts, for values JSON cannot carry (in-process entry points).
 */
export type EncodedValue =
  | { readonly t: 'u' }
  | { readonly t: 'j'; readonly v: unknown }
  | { readonly t: 'b'; readonly v: string }
  | { readonly t: 's'; readonly v: unknown };

/**
 * How an entry point stores its values. `'json'`: what a JSON wire carries (HTTP, RPC,
 * GraphQL store what the client received); values round-trip through JSON, except
 * top-level `undefined`, `Buffer`/`Uint8Array` and strings. `'faithful'`: in-process
 * callers (service methods, BullMQ, events, schedules, `makeIdempotent`, `run`,
 * idempotent transactions) get a copy of at least what `structuredClone` keeps
 * (`Date`, `Map`, `Set`, `bigint`, `Buffer`, typed arrays, `undefined`, `NaN`, `-0`...),
 * and what cannot be copied is refused on the first call (see structured-value.ts).
 */
export type ValueEncoding = 'json' | 'faithful';

export interface EncodedError {
  readonly name: string;
  readonly message: string;
  /** Own enumerable properties of the error (code, status, response, ...). */
  readonly props?: Record<string, unknown>;
  /** The constructor names of its prototype chain, nearest first (records before 0.5 have none). */
  readonly chain?: readonly string[];
  /**
   * Own enumerable properties of the error as JSON keeps them, where `props` holds the
   * transport's own view of the answer instead (HTTP: `props.body`, what Nest's default
   * handling answers; GraphQL: `props.status` and `body`, or `extensions`). A replay
   * rebuilds the error from `fields` when they are present.
   */
  readonly fields?: Record<string, unknown>;
}

export type StoredOutcome =
  | { readonly kind: 'value'; readonly value: EncodedValue; readonly meta?: OutcomeMeta }
  | { readonly kind: 'error'; readonly error: EncodedError; readonly meta?: OutcomeMeta }
  | { readonly kind: 'unstorable'; readonly reason: string };

/** Transport details kept beside the value, e.g. the HTTP status and replayable headers. */
export interface OutcomeMeta {
  readonly status?: number;
  readonly headers?: Record<string, string | string[]>;
}

const UNDEFINED_VALUE: EncodedValue = { t: 'u' };

/**
 * The stored form of a value. Under `'faithful'`, throws `NotStorableValue` for a value
 * a replay could not return (use `valueOutcome`, which reports it as not storable).
 */
export function encodeValue(value: unknown, encoding: ValueEncoding = 'json'): EncodedValue {
  if (value === undefined) return UNDEFINED_VALUE;
  if (encoding === 'faithful') {
    // Strings, booleans and finite numbers are JSON already: no walk, no Map.
    if (
      typeof value === 'string' ||
      typeof value === 'boolean' ||
      (typeof value === 'number' && Number.isFinite(value) && !Object.is(value, -0))
    ) {
      return { t: 'j', v: value };
    }
    if (Buffer.isBuffer(value)) return { t: 'b', v: value.toString('base64') };
    const structured = encodeStructured(value);
    return structured.tagged ? { t: 's', v: structured.value } : { t: 'j', v: structured.value };
  }
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
    return { t: 'b', v: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  }
  return { t: 'j', v: value };
}

/**
 * The outcome of a handler that returned `value`: its encoded value, or `unstorable`
 * with the reason when it cannot be stored (a stream, or under `'faithful'` anything
 * structured-value.ts refuses). The engine reports that reason on the first call
 * (`response_not_storable`) and duplicates get `IdempotencyNotReplayableError`.
 */
export function valueOutcome(value: unknown, encoding: ValueEncoding, meta?: OutcomeMeta): StoredOutcome {
  const reason = unstorableReason(value);
  if (reason) return { kind: 'unstorable', reason };
  try {
    const encoded = encodeValue(value, encoding);
    return meta === undefined ? { kind: 'value', value: encoded } : { kind: 'value', value: encoded, meta };
  } catch (error) {
    if (error instanceof NotStorableValue) return { kind: 'unstorable', reason: error.reason };
    throw error;
  }
}

export function decodeValue(encoded: EncodedValue): unknown {
  switch (encoded.t) {
    case 'u':
      return undefined;
    case 'b':
      return Buffer.from(encoded.v, 'base64');
    case 's':
      return decodeStructured(encoded.v);
    default:
      return encoded.v;
  }
}

export function encodeError(error: unknown): EncodedError {
  if (error instanceof Error) {
    const props: Record<string, unknown> = {};
    for (const key of Object.keys(error)) props[key] = (error as unknown as Record<string, unknown>)[key];
    return { name: error.name, message: error.message, props, chain: errorChainOf(error) };
  }
  return { name: 'Error', message: String(error) };
}

/**
 * A cached error as a JSON wire (HTTP, GraphQL) stores it, so that a replay can throw it
 * again for the application's exception filters: its name, message, class chain, and its
 * own fields (`fields`) each as JSON keeps it. A field JSON cannot hold (a cycle, a
 * `bigint`) is left out rather than the whole error; a thrown value that is no `Error`
 * keeps its text, with an empty chain.
 */
export function encodeJsonError(error: unknown): EncodedError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error), chain: [] };
  const fields: Record<string, unknown> = {};
  for (const key of Object.keys(error)) {
    try {
      const text = JSON.stringify((error as unknown as Record<string, unknown>)[key]);
      if (text !== undefined) fields[key] = JSON.parse(text) as unknown;
    } catch {
      // Left out: the rest of the error still replays.
    }
  }
  return { name: error.name, message: error.message, chain: errorChainOf(error), fields };
}

/**
 * Rebuilds a cached error with the original name, message and properties (`fields`, else
 * `props`), on the prototype of the first class of its chain that `classes` lists
 * (`cacheErrors: [DeclinedError]`) or that is built in (`RangeError`), else `Error`'s.
 * No constructor runs.
 */
export function decodeError(encoded: EncodedError, classes?: readonly ErrorClass[]): Error {
  const error = new Error(encoded.message);
  const prototype = errorPrototypeFor(encoded.chain?.length ? encoded.chain : [encoded.name], classes);
  if (prototype !== Error.prototype) Object.setPrototypeOf(error, prototype);
  const own = encoded.fields ?? encoded.props ?? {};
  Object.assign(error, own);
  // An own `name` (HttpException sets one) stays as the original had it.
  if (!Object.prototype.hasOwnProperty.call(own, 'name')) {
    Object.defineProperty(error, 'name', { value: encoded.name, enumerable: false, configurable: true, writable: true });
  }
  return error;
}

/** A value that JSON cannot represent faithfully is reported here instead of being mangled. */
export function unstorableReason(value: unknown): string | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'the response is a stream';
  if (typeof (value as { getStream?: unknown }).getStream === 'function') return 'the response is a StreamableFile';
  if (typeof (value as { subscribe?: unknown }).subscribe === 'function') return 'the response is an Observable';
  if (typeof (value as { then?: unknown }).then === 'function') return 'the response is a Promise';
  return undefined;
}

export function serializeOutcome(outcome: StoredOutcome): string {
  return JSON.stringify(outcome);
}

export function deserializeOutcome(result: string): StoredOutcome {
  return JSON.parse(result) as StoredOutcome;
}
