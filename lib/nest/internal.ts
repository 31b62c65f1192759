/** The controller property `@Idempotent()` has the module's runtime injected into (not exported from the package). */
export const RUNTIME_PROPERTY = '__nestjsIdempotencyRuntime';
