import { createHash } from 'node:crypto';
import { IdempotencyRequestInvalidError } from './errors.js';

/** Deep enough for any sane payload, shallow enough that hostile nesting cannot blow the stack. */
const MAX_DEPTH = 256;

/**
 * JSON with object keys sorted, so that two payloads equal as data hash equal whatever
 * their key order. Buffers and typed arrays become base64, Dates ISO strings, bigints
 * decimal strings; `undefined` members are dropped like JSON.stringify does.
 */
export function canonicalJson(value: unknown): string {
  const parts: string[] = [];
  write(value, parts, 0, new Set());
  return parts.join('');
}

function write(value: unknown, out: string[], depth: number, stack: Set<object>): void {
  if (value === null || value === undefined) {
    out.push('null');
    return;
  }
  switch (typeof value) {
    case 'string':
      out.push(JSON.stringify(value));
      return;
    case 'number':
      out.push(Number.isFinite(value) ? String(value) : 'null');
      return;
    case 'boolean':
      out.push(value ? 'true' : 'false');
      return;
    case 'bigint':
      out.push(JSON.stringify(value.toString()));
      return;
    case 'function':
    case 'symbol':
      out.push('null');
      return;
  }
  if (depth >= MAX_DEPTH) throw new IdempotencyRequestInvalidError(`payload nested deeper than ${MAX_DEPTH} levels`);
  const obj = value as object;
  if (ArrayBuffer.isView(obj)) {
    out.push(JSON.stringify('b64:' + Buffer.from(obj.buffer, obj.byteOffset, obj.byteLength).toString('base64')));
    return;
  }
  if (obj instanceof Date) {
    out.push(JSON.stringify(Number.isNaN(obj.getTime()) ? null : obj.toISOString()));
    return;
  }
  if (stack.has(obj)) throw new IdempotencyRequestInvalidError('payload contains a circular reference');
  stack.add(obj);
  if (Array.isArray(obj)) {
    out.push('[');
    for (let i = 0; i < obj.length; i++) {
      if (i > 0) out.push(',');
      write(obj[i], out, depth + 1, stack);
    }
    out.push(']');
  } else {
    const source = typeof (obj as { toJSON?: unknown }).toJSON === 'function' ? (obj as { toJSON(): unknown }).toJSON() : obj;
    if (source !== obj) {
      stack.delete(obj);
      write(source, out, depth + 1, stack);
      return;
    }
    const keys = Object.keys(obj).sort();
    out.push('{');
    let first = true;
    for (const key of keys) {
      const member = (obj as Record<string, unknown>)[key];
      if (member === undefined || typeof member === 'function' || typeof member === 'symbol') continue;
      if (!first) out.push(',');
      first = false;
      out.push(JSON.stringify(key), ':');
      write(member, out, depth + 1, stack);
    }
    out.push('}');
  }
  stack.delete(obj);
}

export function sha256(input: string): string {
  return createHash('sha256').update(input).digest('base64url');
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
