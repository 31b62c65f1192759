/**
 * The client's key, for handlers that also key their database transaction with it.
 * `@Idempotent()` accepts `Idempotency-Key` and `X-Idempotency-Key` (and has already
 * refused a request with neither), so read both the same way.
 */
export function clientKeyOf(headers: Record<string, string | string[] | undefined>): string {
  const value = headers['idempotency-key'] ?? headers['x-idempotency-key'];
  return Array.isArray(value) ? value.join(', ') : String(value ?? '');
}
