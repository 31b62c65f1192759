import { IDEMPOTENCY_RUNTIME } from './idempotency.constants.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';

/**
 * The members of Nest's `InstanceWrapper` (what `DiscoveryService` lists) read here.
 * Nest does not export the class from a stable path, so it is described, not imported;
 * these members exist on Nest 10, 11 and 12.
 */
export interface ProviderWrapper {
  readonly token?: unknown;
  readonly metatype?: Function | null;
  /** Set (possibly empty) for a `useFactory` provider, null for a class. */
  readonly inject?: readonly unknown[] | null;
  readonly instance: unknown;
  readonly host?: NestModuleRef | null;
  /** A `useExisting` alias: the provider it stands for is listed (and checked) itself. */
  readonly isAlias?: boolean;
  readonly isTransient?: boolean;
  isDependencyTreeStatic(): boolean;
  getStaticTransientInstances?(): Array<{ instance?: unknown } | undefined>;
}

/** The members of Nest's `Module` read here. */
export interface NestModuleRef {
  readonly id?: string;
  readonly name?: string;
  readonly metatype?: unknown;
  readonly providers: Map<unknown, { instance?: unknown; isAlias?: boolean }>;
  readonly imports: Set<NestModuleRef | undefined | null>;
  readonly exports: Set<unknown>;
}

/** How Nest builds a provider's instances: only `class` ones get `@Idempotent()`'s runtime injected as a property. */
export type ProviderKind = 'class' | 'factory' | 'value';

export function providerKindOf(wrapper: ProviderWrapper): ProviderKind {
  if (!wrapper.metatype) return 'value';
  return wrapper.inject === null || wrapper.inject === undefined ? 'class' : 'factory';
}

/**
 * The instances Nest built for a provider by the time modules initialise: the one
 * instance of a singleton; each consumer's instance of a transient provider (the
 * wrapper's own "instance" is then an unconstructed prototype); none for a
 * request-scoped provider (built per request).
 */
export function builtInstancesOf(wrapper: ProviderWrapper): object[] {
  if (wrapper.isTransient) {
    const built = typeof wrapper.getStaticTransientInstances === 'function' ? wrapper.getStaticTransientInstances() : [];
    return built.map((entry) => entry?.instance).filter(isObject);
  }
  if (!wrapper.isDependencyTreeStatic()) return [];
  return isObject(wrapper.instance) ? [wrapper.instance] : [];
}

/** An object whose prototype shows the provider's methods: a built instance, else Nest's prototype placeholder. */
export function sampleInstanceOf(wrapper: ProviderWrapper): object | undefined {
  return builtInstancesOf(wrapper)[0] ?? (isObject(wrapper.instance) ? wrapper.instance : undefined);
}

/**
 * The runtime a provider of `host` gets when it injects `IDEMPOTENCY_RUNTIME`, found as
 * Nest's injector finds a dependency: the module's own providers, then its imports
 * (global modules are among them) and what they export or re-export. Undefined when
 * the module cannot reach any IdempotencyModule.
 */
export function runtimeReachableFrom(host: NestModuleRef | null | undefined): IdempotencyRuntime | undefined {
  if (!host) return undefined;
  const own = host.providers.get(IDEMPOTENCY_RUNTIME);
  if (own) return own.instance as IdempotencyRuntime | undefined;
  return lookupInImports(host, new Set(), false);
}

function lookupInImports(module: NestModuleRef, seen: Set<unknown>, traversing: boolean): IdempotencyRuntime | undefined {
  for (const related of module.imports ?? []) {
    if (!related) continue;
    // Past the first level, only modules re-exported by the one we came through count.
    if (traversing && !module.exports.has(related.metatype)) continue;
    const id = related.id ?? related;
    if (seen.has(id)) continue;
    seen.add(id);
    if (related.exports.has(IDEMPOTENCY_RUNTIME) && related.providers.has(IDEMPOTENCY_RUNTIME)) {
      return related.providers.get(IDEMPOTENCY_RUNTIME)?.instance as IdempotencyRuntime | undefined;
    }
    const found = lookupInImports(related, seen, true);
    if (found) return found;
  }
  return undefined;
}

/** `RefundService in ShopModule`, `'LEGACY_REFUNDS' (useFactory) in BillingModule`, for messages. */
export function describeProvider(wrapper: ProviderWrapper): string {
  const token = wrapper.token;
  const name =
    typeof token === 'function' ? token.name || 'an anonymous class' : typeof token === 'symbol' ? token.toString() : `'${String(token)}'`;
  const kind = providerKindOf(wrapper);
  const how = kind === 'factory' ? ' (useFactory)' : kind === 'value' ? ' (useValue)' : '';
  return `${name}${how} in ${wrapper.host?.name ?? 'an unknown module'}`;
}

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}
