/** Injection tokens of the sample app's own providers. */
export const DATA_SOURCE = Symbol('sample-app:DataSource');
export const SAMPLE_APP_CONFIG = Symbol('sample-app:config');
/** The `LockProvider` of the settlement job: memory, or Redis with REDIS_URL. */
export const LOCK_PROVIDER = Symbol('sample-app:LockProvider');
/**
 * The `IdempotencyStore` of the refund flow's records and steps (refunds/refund-flow.ts):
 * a `TypeOrmIdempotencyStore` on the business database, durable even when the module's
 * store is process memory.
 */
export const FLOW_STORE = Symbol('sample-app:FlowStore');
