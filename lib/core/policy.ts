import { cachedErrorClasses, cachedErrorSelector, type CacheErrors } from './cached-errors.js';
import { DEFAULT_LEASE_TTL, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TTL, DEFAULT_WAIT_TIMEOUT } from './defaults.js';
import type { IdempotencyEventListener } from './events.js';
import { checkPolicyNumbers, type ExecutionPolicy, type InFlightStrategy, type StoreErrorStrategy } from './execution.js';
import type { IdempotencyStore } from './store.js';

/**
 * The options of an execution policy as an entry point has them: anything left undefined
 * takes the entry point's defaults (`PolicyDefaults`, the module's options), then the
 * library's (`defaults.ts`).
 */
export interface PolicyOptions {
  readonly store?: IdempotencyStore;
  readonly ttl?: number;
  readonly leaseTtl?: number;
  readonly inFlight?: InFlightStrategy;
  readonly waitTimeout?: number;
  readonly cacheErrors?: CacheErrors;
  readonly onStoreError?: StoreErrorStrategy;
  readonly maxResponseBytes?: number;
}

/** What an entry point lays under every policy it resolves (`IdempotencyModule.forRoot()`'s options). */
export interface PolicyDefaults extends PolicyOptions {
  readonly store: IdempotencyStore;
  readonly onEvent?: IdempotencyEventListener;
}

/** Policies made by `resolvePolicy`, checked once there: the engine does not check them again per request. */
const resolved = new WeakSet<ExecutionPolicy>();

/**
 * The one mapping from options to an `ExecutionPolicy`, for every entry point
 * (`makeIdempotent`, `IdempotencyService.run`, `@Idempotent()` handlers): each field is the
 * entry point's own option, else its default (`defaults`, the module's), else the
 * library's. The numbers are checked here, once, by the engine's rule (entry points check
 * their own options earlier, under their own names); the engine then takes the policy as
 * it is on every request, and checks only a policy built by hand.
 *
 * `handler` is the name events report (`Class.method`, `run:refunds`, the function's scope).
 */
export function resolvePolicy(handler: string, options: PolicyOptions, defaults: PolicyDefaults): ExecutionPolicy {
  const policy: ExecutionPolicy = {
    store: options.store ?? defaults.store,
    ttl: options.ttl ?? defaults.ttl ?? DEFAULT_TTL,
    leaseTtl: options.leaseTtl ?? defaults.leaseTtl ?? DEFAULT_LEASE_TTL,
    inFlight: options.inFlight ?? defaults.inFlight ?? 'wait',
    waitTimeout: options.waitTimeout ?? defaults.waitTimeout ?? DEFAULT_WAIT_TIMEOUT,
    cacheErrors: cachedErrorSelector(options.cacheErrors ?? defaults.cacheErrors),
    errorClasses: cachedErrorClasses(options.cacheErrors ?? defaults.cacheErrors),
    onStoreError: options.onStoreError ?? defaults.onStoreError ?? 'fail-closed',
    maxResponseBytes: options.maxResponseBytes ?? defaults.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
    onEvent: defaults.onEvent,
    handler,
  };
  checkPolicyNumbers('IdempotencyEngine', policy);
  resolved.add(policy);
  return policy;
}

/** True for a policy `resolvePolicy` made (and checked); false for one built by hand. */
export function isResolvedPolicy(policy: ExecutionPolicy): boolean {
  return resolved.has(policy);
}
