import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { DEFAULT_MAX_RESPONSE_BYTES, IdempotencyConfigurationError, isIdempotencyError, type IdempotencyStore } from '../core/index.js';
import { resolveHandlerConfig, validateModuleOptions } from './handler-config.js';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';
import { IdempotencyService } from './idempotency.service.js';
import { RUNTIME_PROPERTY } from './internal.js';
import { staticMethodError } from './method-runner.js';
import type { IdempotentMethodOptions } from './method-options.js';
import { MethodScopes } from './method-scope.js';
import {
  builtInstancesOf,
  describeProvider,
  providerKindOf,
  runtimeReachableFrom,
  sampleInstanceOf,
  type ProviderWrapper,
} from './provider-instances.js';
import type { MethodHandlerConfig } from './transports/method/method.adapter.js';
import { transportFor } from './transports/registry.js';
import type { Transport } from './transports/transport.js';

/**
 * Finds every `@Idempotent()` handler when the application initialises and checks its
 * options against the module it will run with, so that a mistake stops `app.init()` /
 * `app.listen()` with a message naming `Class.method` and the fix, instead of answering
 * the first request with a 500. Also asks each store to `verify()` itself (a missing
 * table, an unsupported driver).
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit, OnApplicationShutdown {
  /** Instances this module gave its runtime to (from useFactory / useValue providers), taken back at shutdown. */
  private readonly connected = new Map<object, IdempotencyRuntime>();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    @Inject(IdempotencyService) private readonly service: IdempotencyService,
  ) {}

  async onModuleInit(): Promise<void> {
    try {
      validateModuleOptions(this.service);
    } catch (error) {
      throw this.report('IdempotencyModule.forRoot()', error);
    }
    // Each store with the largest result its handlers may store, for its boot check.
    const stores = new Map<IdempotencyStore, number>([
      [this.service.store, this.service.options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES],
    ]);
    // Per boot of this application: two applications in one process never see each other's methods here.
    const scopes = new MethodScopes();
    const served = new Set<Transport>();
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()] as ProviderWrapper[]) {
      // A useExisting alias hands out the instance of the provider it names, which is checked itself.
      if (wrapper.isAlias) continue;
      const sample = sampleInstanceOf(wrapper);
      if (!sample) continue;
      const prototype = Object.getPrototypeOf(sample) as object | null;
      if (!prototype) continue;
      const owner = sample.constructor as Function;
      this.refuseStaticMethods(owner);
      const methods = this.decoratedMethods(prototype);
      if (methods.length === 0) continue;
      // Handlers served by another IdempotencyModule instance are that module's to check.
      if (!this.connect(wrapper, owner, methods[0].name)) continue;
      // Request-scoped and transient providers are one provider however many instances they make.
      const provider = wrapper.isTransient || !wrapper.isDependencyTreeStatic() ? wrapper : sample;
      for (const { name, method, options } of methods) {
        const site = { method, owner, propertyName: name, handlerName: `${owner.name}.${name}` };
        const transport = transportFor(site);
        let config;
        try {
          config = resolveHandlerConfig(this.service, transport, site, options);
        } catch (error) {
          throw this.report(site.handlerName, error);
        }
        served.add(transport);
        const store = config.policy.store;
        stores.set(store, Math.max(stores.get(store) ?? 0, config.policy.maxResponseBytes));
        if (transport.reach !== 'method') continue;
        // A method without a request: a provider method, an event listener, a BullMQ processor, a schedule.
        scopes.add({
          operation: (config as MethodHandlerConfig).operation,
          explicit: (options as IdempotentMethodOptions).scope !== undefined,
          namedByClass: (config as MethodHandlerConfig).target.namedByClass,
          handler: method,
          owner,
          handlerName: site.handlerName,
          provider,
          providerName: describeProvider(wrapper),
        });
      }
    }
    try {
      scopes.check();
    } catch (error) {
      throw this.report('IdempotencyModule', error);
    }
    if ([...served].some((transport) => transport.boot)) {
      const instances = this.discovery.getProviders().map((wrapper) => wrapper.instance as unknown);
      for (const transport of served) transport.boot?.(instances);
    }
    for (const [store, maxResponseBytes] of stores) {
      this.service.watchStore(store);
      await this.verify(store, maxResponseBytes);
    }
  }

  /** Gives back the runtimes this module put on instances Nest did not build, so that a later application can take them. */
  onApplicationShutdown(): void {
    for (const [instance, runtime] of this.connected) {
      if ((instance as Record<string, unknown>)[RUNTIME_PROPERTY] === runtime)
        delete (instance as Record<string, unknown>)[RUNTIME_PROPERTY];
    }
    this.connected.clear();
  }

  private decoratedMethods(prototype: object): Array<{ name: string; method: Function; options: IdempotentOptions }> {
    const found = [];
    for (const name of this.scanner.getAllMethodNames(prototype)) {
      const method = (prototype as Record<string, unknown>)[name] as Function;
      const options = Reflect.getMetadata(IDEMPOTENT_METADATA, method) as IdempotentOptions | undefined;
      if (options) found.push({ name, method, options });
    }
    return found;
  }

  /**
   * Whether this module serves the provider's `@Idempotent()` methods (false: another
   * IdempotencyModule does). Nest injects the runtime as a property into the instances it
   * builds from a class, a transient provider's included; an instance a `useFactory` or
   * `useValue` provider hands over was built by the application, and gets the runtime of
   * the module it is declared in here, as a class provider of that module would.
   * Throws when the provider's module reaches no IdempotencyModule at all.
   */
  private connect(wrapper: ProviderWrapper, owner: Function, method: string): boolean {
    const handler = `${owner.name}.${method}`;
    const built = builtInstancesOf(wrapper) as Array<Record<string, unknown>>;
    const kind = providerKindOf(wrapper);
    const runtime =
      kind === 'class' && built.length > 0
        ? (built.map((instance) => instance[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined).find(Boolean) ?? undefined)
        : runtimeReachableFrom(wrapper.host);
    if (!runtime) throw this.report(handler, notImported(handler, wrapper));
    if (runtime.service !== this.service) return false;
    if (kind === 'class') return true;
    for (const instance of built) {
      const current = instance[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined;
      if (current === runtime) continue;
      if (current) throw this.report(handler, servedElsewhere(handler, owner, wrapper));
      Object.defineProperty(instance, RUNTIME_PROPERTY, { value: runtime, configurable: true, writable: true, enumerable: false });
      this.connected.set(instance, runtime);
    }
    return true;
  }

  /** A static method has no instance for Nest to inject into, so `@Idempotent()` there could never run protected. */
  private refuseStaticMethods(owner: Function): void {
    for (
      let type: unknown = owner;
      typeof type === 'function' && type !== Function.prototype && type !== Object;
      type = Object.getPrototypeOf(type)
    ) {
      for (const name of Object.getOwnPropertyNames(type)) {
        const value = Object.getOwnPropertyDescriptor(type, name)?.value as unknown;
        if (typeof value !== 'function' || name === 'prototype' || !Reflect.getMetadata(IDEMPOTENT_METADATA, value)) continue;
        throw this.report(`${owner.name}.${name}`, staticMethodError(owner.name, name));
      }
    }
  }

  /** A store that can never work stops the boot; one that is only unreachable now is logged (requests get 503 until it answers). */
  private async verify(store: IdempotencyStore, maxResponseBytes: number): Promise<void> {
    if (typeof store.verify !== 'function') return;
    try {
      await store.verify({ maxResponseBytes });
    } catch (error) {
      if (isIdempotencyError(error) && error.code === 'IDEMPOTENCY_CONFIGURATION_ERROR') throw this.report(store.constructor.name, error);
      this.service.log.warn(
        `verify:${store.constructor.name}`,
        `${store.constructor.name} did not answer its boot check (${(error as Error)?.message ?? String(error)}); requests will get 503 until it does.`,
      );
    }
  }

  private report(where: string, error: unknown): unknown {
    if (isIdempotencyError(error)) this.service.reportConfigurationError(where, error);
    return error;
  }
}

function notImported(handler: string, wrapper: ProviderWrapper): IdempotencyConfigurationError {
  const module = wrapper.host?.name ?? 'its module';
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${handler} cannot find IdempotencyModule: ${describeProvider(wrapper)} cannot reach it (${module} does not import IdempotencyModule, and no IdempotencyModule is global).`,
    `Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module, or import IdempotencyModule into ${module}.`,
  );
}

function servedElsewhere(handler: string, owner: Function, wrapper: ProviderWrapper): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${handler}: the ${owner.name} object of ${describeProvider(wrapper)} is already served by another IdempotencyModule: one object is provided to two applications (a shared useValue or a factory that returns a module-level instance), or to two modules with their own IdempotencyModule.`,
    `Build one instance per application, e.g. useFactory: () => new ${owner.name}(...), or provide ${owner.name} as a class (providers: [${owner.name}]).`,
  );
}
