// Symbol.for / strings so that the ESM and CommonJS copies of this package, when both
// end up in one process, still share tokens and metadata.
export const IDEMPOTENCY_MODULE_OPTIONS = Symbol.for('nestjs-idempotency:module-options');
export const IDEMPOTENCY_SERVICE = Symbol.for('nestjs-idempotency:service');
export const IDEMPOTENT_METADATA = 'nestjs-idempotency:idempotent';
/** Response header set on every replayed answer. */
export const REPLAYED_HEADER = 'Idempotent-Replayed';
/** The `IdempotencyRuntime` `@Idempotent()`'s method wrapper calls into (provided by IdempotencyModule). */
export const IDEMPOTENCY_RUNTIME = Symbol.for('nestjs-idempotency:runtime');
