/**
 * What a completed record replays, serialized to the opaque `result` string stores keep.
 * Values round-trip through JSON, except top-level `undefined`, `Buffer`/`Uint8Array`
 * and strings, which come back as exactly what the handler returned.
 */
export type EncodedValue = { readonly t: 'u' } | { readonly t: 'j'; readonly v: unknown } | { readonly t: 'b'; readonly v: string };

export interface EncodedError {
  readonly name: string;
  readonly message: string;
  /** Own enumerable properties of the error (code, status, response, ...). */
  readonly props?: Record<string, unknown>;
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

export function encodeValue(value: unknown): EncodedValue {
  if (value === undefined) return { t: 'u' };
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
    return { t: 'b', v: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  }
  return { t: 'j', v: value };
}

export function decodeValue(encoded: EncodedValue): unknown {
  switch (encoded.t) {
    case 'u':
      return undefined;
    case 'b':
      return Buffer.from(encoded.v, 'base64');
    default:
      return encoded.v;
  }
}

export function encodeError(error: unknown): EncodedError {
  if (error instanceof Error) {
    const props: Record<string, unknown> = {};
    for (const key of Object.keys(error)) props[key] = (error as unknown as Record<string, unknown>)[key];
    return { name: error.name, message: error.message, props };
  }
  return { name: 'Error', message: String(error) };
}

/** Rebuilds a cached error as a plain Error carrying the original name, message and properties. */
export function decodeError(encoded: EncodedError): Error {
  const error = new Error(encoded.message);
  Object.assign(error, encoded.props ?? {});
  Object.defineProperty(error, 'name', { value: encoded.name, enumerable: false, configurable: true, writable: true });
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
