/** Injection tokens of the sample app's own providers. */
export const DATA_SOURCE = Symbol('sample-app:DataSource');
export const SAMPLE_APP_CONFIG = Symbol('sample-app:config');
/** The `LockProvider` of the settlement job: memory, or Redis with REDIS_URL. */
export const LOCK_PROVIDER = Symbol('sample-app:LockProvider');
