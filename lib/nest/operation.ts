/**
 * The operation a request or message asks for, as the application serves it, is read by
 * its transport (`Transport.operationOf`: transports/http/route-operation.ts,
 * transports/rpc/message-operation.ts, the GraphQL field, a method's declared scope); with
 * the principal it makes the scope of every key.
 */

/** The scope string of an operation and principal; keys of different scopes never meet. */
export function scopeOf(operation: string, principal?: string | number | null): string {
  return principal === undefined || principal === null ? operation : operation + '\u0000' + String(principal);
}
