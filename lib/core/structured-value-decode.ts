/**
 * The decoder of the faithful value encoding: rebuilds what `encodeStructured`
 * (structured-value.ts, which documents the format) wrote. Objects are registered in
 * the order the encoder met them, so `{"$":"r","v":n}` finds the n-th one.
 */

const TYPED_ARRAYS: Record<string, new (buffer: ArrayBuffer) => ArrayBufferView> = {
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
  DataView,
};
const float16 = (globalThis as { Float16Array?: new (buffer: ArrayBuffer) => ArrayBufferView }).Float16Array;
if (float16) TYPED_ARRAYS.Float16Array = float16;

const ERRORS: Record<string, ErrorConstructor> = {
  Error,
  EvalError,
  RangeError,
  ReferenceError,
  SyntaxError,
  TypeError,
  URIError,
};

/** Rebuilds what `encodeStructured` wrote (its `value`, when `tagged`). */
export function decodeStructured(encoded: unknown): unknown {
  return decode(encoded, []);
}

type Node = Record<string, unknown> & { $?: unknown; v?: unknown };

function decode(node: unknown, refs: unknown[]): unknown {
  if (node === null || typeof node !== 'object') return node;
  if (Array.isArray(node)) {
    const out = new Array<unknown>(node.length);
    refs.push(out);
    for (let i = 0; i < node.length; i++) {
      const member = node[i] as Node | null;
      if (member !== null && typeof member === 'object' && member.$ === 'h') continue;
      out[i] = decode(member, refs);
    }
    return out;
  }
  const tagged = node as Node;
  if (!Object.prototype.hasOwnProperty.call(tagged, '$')) return decodeMembers(tagged, {}, refs);
  switch (tagged.$) {
    case 'u':
      return undefined;
    case 'N':
      return Number(tagged.v);
    case 'I':
      return BigInt(tagged.v as string);
    case 'r':
      return refs[tagged.v as number];
    case 'o':
      return decodeMembers(tagged.v as Node, {}, refs);
    case 'D':
      return registered(refs, new Date(tagged.v === null ? NaN : (tagged.v as number)));
    case 'R':
      return registered(refs, new RegExp(tagged.s as string, tagged.f as string));
    case 'B':
      return registered(refs, Buffer.from(tagged.v as string, 'base64'));
    case 'A':
      return registered(refs, copyOf(tagged.v as string));
    case 'T': {
      const Type = TYPED_ARRAYS[tagged.c as string] ?? Uint8Array;
      return registered(refs, new Type(copyOf(tagged.v as string)));
    }
    case 'M': {
      const map = registered(refs, new Map<unknown, unknown>());
      for (const [key, member] of tagged.v as [unknown, unknown][]) {
        const decodedKey = decode(key, refs);
        map.set(decodedKey, decode(member, refs));
      }
      return map;
    }
    case 'S': {
      const set = registered(refs, new Set<unknown>());
      for (const member of tagged.v as unknown[]) set.add(decode(member, refs));
      return set;
    }
    case 'E':
      return decodeError(tagged, refs);
    case 'X':
      // The boxed value is a primitive: decoding it registers nothing before the box.
      return registered(refs, Object(decode(tagged.v, refs)) as object);
    default:
      // Not written by this version: hand the data back rather than guess.
      return decodeMembers(tagged, {}, refs);
  }
}

function registered<T>(refs: unknown[], value: T): T {
  refs.push(value);
  return value;
}

function decodeMembers(node: Node, out: Record<string, unknown>, refs: unknown[]): Record<string, unknown> {
  refs.push(out);
  for (const key of Object.keys(node)) setOwn(out, key, decode(node[key], refs));
  return out;
}

function decodeError(node: Node, refs: unknown[]): Error {
  const name = node.n as string;
  const Type = ERRORS[name] ?? Error;
  const error = new Type(node.m as string);
  refs.push(error);
  if (error.name !== name) Object.defineProperty(error, 'name', { value: name, enumerable: false, configurable: true, writable: true });
  if (node.s !== undefined) Object.defineProperty(error, 'stack', { value: node.s, enumerable: false, configurable: true, writable: true });
  if ('c' in node)
    Object.defineProperty(error, 'cause', { value: decode(node.c, refs), enumerable: false, configurable: true, writable: true });
  if (node.p) {
    // The members object was registered by the encoder as part of the error, not on its own.
    const members = node.p as Node;
    for (const key of Object.keys(members)) setOwn(error as unknown as Record<string, unknown>, key, decode(members[key], refs));
  }
  return error;
}

function copyOf(base64: string): ArrayBuffer {
  const bytes = Buffer.from(base64, 'base64');
  const buffer = new ArrayBuffer(bytes.byteLength);
  new Uint8Array(buffer).set(bytes);
  return buffer;
}

/** Sets a member named `__proto__` as an own member, never as the prototype. */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}
