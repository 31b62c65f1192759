import { IdempotencyConfigurationError } from '../core/index.js';
import type { ExecutionPolicy } from '../core/execution.js';
import type { PolicyOptions } from '../core/policy.js';
import type { IdempotencyStore } from '../core/store.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { mergeHandlerOptions, validateIdempotentOptions } from './idempotency.validation.js';
import type { ResolvedHandlerConfig } from './transport.adapter.js';
import type { BaseHandlerConfig, HandlerSite, Transport } from './transports/transport.js';

/** What the configuration pipeline needs of a module (`IdempotencyService`): its options, its store, its policies. */
export interface ModuleDefaults {
  readonly options: Readonly<IdempotentOptions & { readonly enabled?: boolean; readonly exposeConfigurationErrors?: boolean }>;
  readonly store: IdempotencyStore;
  policy(handler: string, overrides: PolicyOptions): ExecutionPolicy;
}

/**
 * The one configuration pipeline of `@Idempotent()`: the handler's options over the
 * module's (less what its transport does not inherit), checked by its transport's rules
 * and the rules of every handler, with its policy resolved once and its transport's own
 * fields. The explorer runs it at boot for every decorated method; the runtime runs it
 * (cached) at a handler's first request or call. Throws an `IdempotencyConfigurationError`
 * that names the handler and the fix.
 */
export function resolveHandlerConfig(
  module: ModuleDefaults,
  transport: Transport,
  site: HandlerSite,
  own: IdempotentOptions,
): ResolvedHandlerConfig {
  const where = `@Idempotent() on ${site.handlerName}`;
  const options = mergeHandlerOptions(module.options, own, transport.notInherited);
  transport.validate?.(where, options, own, site);
  validateIdempotentOptions(where, options, options.store ?? module.store);
  const base: BaseHandlerConfig = {
    handlerName: site.handlerName,
    options,
    adapter: transport,
    required: options.required ?? true,
    policy: module.policy(site.handlerName, {
      store: options.store,
      ttl: options.ttl,
      leaseTtl: options.leaseTtl,
      inFlight: options.inFlight ?? transport.defaultInFlight,
      waitTimeout: options.waitTimeout,
      cacheErrors: options.cacheErrors,
      onStoreError: options.onStoreError,
      maxResponseBytes: options.maxResponseBytes,
    }),
  };
  return transport.configure(base, own, site);
}

/** The module's own options, checked by the rules of every handler (boot, before any handler). */
export function validateModuleOptions(module: ModuleDefaults): void {
  const expose: unknown = module.options.exposeConfigurationErrors;
  if (expose !== undefined && typeof expose !== 'boolean') {
    throw new IdempotencyConfigurationError(
      `IdempotencyModule.forRoot(): exposeConfigurationErrors must be true or false, got ${typeof expose}.`,
      'Write exposeConfigurationErrors: true to send configuration errors to clients (development), or leave it out.',
    );
  }
  validateIdempotentOptions('IdempotencyModule.forRoot()', mergeHandlerOptions(module.options, {}), module.store);
}

/** Resolved configs, once per handler and key (the request's context type, or the class a method is called on). */
export class HandlerConfigs {
  private readonly byHandler = new WeakMap<Function, Map<unknown, ResolvedHandlerConfig>>();

  get(handler: Function, key: unknown): ResolvedHandlerConfig | undefined {
    return this.byHandler.get(handler)?.get(key);
  }

  set(handler: Function, key: unknown, config: ResolvedHandlerConfig): void {
    let byKey = this.byHandler.get(handler);
    if (!byKey) this.byHandler.set(handler, (byKey = new Map()));
    byKey.set(key, config);
  }
}
