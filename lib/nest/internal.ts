/** The controller property `@Idempotent()` has the module's interceptor injected into (not exported from the package). */
export const INTERCEPTOR_PROPERTY = '__nestjsIdempotencyInterceptor';
