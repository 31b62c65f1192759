import { IdempotencyKeyInvalidError } from './errors.js';

export const MAX_KEY_LENGTH = 255;
// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;

/**
 * Checks a client-supplied key and returns it in canonical form. A value written as a
 * structured-field string (`"abc"`, as the IETF draft specifies) is unquoted, so
 * `Idempotency-Key: "abc"` and `Idempotency-Key: abc` name the same key.
 */
export function normalizeIdempotencyKey(raw: unknown): string {
  if (typeof raw === 'number' && Number.isFinite(raw)) raw = String(raw);
  if (typeof raw !== 'string') throw new IdempotencyKeyInvalidError('it must be a string');
  let key = raw;
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) {
    key = unquoteStructuredString(key);
  }
  if (key.length === 0 || key.trim().length === 0) throw new IdempotencyKeyInvalidError('it is empty');
  if (key.length > MAX_KEY_LENGTH) throw new IdempotencyKeyInvalidError(`it is longer than ${MAX_KEY_LENGTH} characters`);
  if (CONTROL_CHARACTERS.test(key)) throw new IdempotencyKeyInvalidError('it contains control characters');
  return key;
}

function unquoteStructuredString(quoted: string): string {
  let out = '';
  for (let i = 1; i < quoted.length - 1; i++) {
    const ch = quoted[i];
    if (ch === '\\') {
      const next = quoted[i + 1];
      if ((next !== '"' && next !== '\\') || i + 1 >= quoted.length - 1) {
        throw new IdempotencyKeyInvalidError('it is a malformed quoted string');
      }
      out += next;
      i++;
    } else if (ch === '"') {
      throw new IdempotencyKeyInvalidError('it is a malformed quoted string');
    } else {
      out += ch;
    }
  }
  return out;
}
