import { IdempotencyKeyInvalidError } from './errors.js';

export const MAX_KEY_LENGTH = 255;
// eslint-disable-next-line no-control-regex
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f]/;

/**
 * Checks a client key and returns it as the key it names: 1 to 255 characters, not
 * blank, no control characters. Keys from a body, a message id or your own code are
 * taken as they are (quotes included); the `Idempotency-Key` header's structured-field
 * form is decoded before, by `parseIdempotencyKeyHeader`.
 */
export function normalizeIdempotencyKey(raw: unknown): string {
  if (typeof raw === 'number' && Number.isFinite(raw)) raw = String(raw);
  if (typeof raw !== 'string') throw new IdempotencyKeyInvalidError('it must be a string');
  const key = raw;
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

/**
 * The one key an `Idempotency-Key` header carries, decoded: a bare token as it is, a
 * structured-field string (`"abc"`, as the IETF draft writes it) unquoted, so
 * `Idempotency-Key: "abc"` and `Idempotency-Key: abc` name the same key. Node joins
 * repeated header lines with `", "`, so a comma outside a quoted string, or a quote
 * inside a bare token, means the request sent more than one value (or a broken one):
 * refused, never read as one key `"a, b"`. Pass the result to `normalizeIdempotencyKey`.
 */
export function parseIdempotencyKeyHeader(value: string | readonly string[]): string {
  if (typeof value !== 'string') {
    if (value.length !== 1) throw new IdempotencyKeyInvalidError('the request carries more than one Idempotency-Key value');
    value = value[0]!;
  }
  const trimmed = value.trim();
  if (trimmed.startsWith('"')) {
    // The closing quote is the first unescaped one; nothing may follow it.
    let i = 1;
    for (; i < trimmed.length; i++) {
      if (trimmed[i] === '\\') i++;
      else if (trimmed[i] === '"') break;
    }
    if (i >= trimmed.length) throw new IdempotencyKeyInvalidError('it is a malformed quoted string (a quote is not closed)');
    if (i !== trimmed.length - 1) {
      throw new IdempotencyKeyInvalidError(
        trimmed
          .slice(i + 1)
          .trimStart()
          .startsWith(',')
          ? 'the request carries more than one Idempotency-Key value'
          : 'it is a malformed quoted string (text after the closing quote)',
      );
    }
    return unquoteStructuredString(trimmed);
  }
  if (trimmed.includes(',')) throw new IdempotencyKeyInvalidError('the request carries more than one Idempotency-Key value');
  if (trimmed.includes('"')) throw new IdempotencyKeyInvalidError('it is a malformed quoted string (a quote inside a bare key)');
  return trimmed;
}
