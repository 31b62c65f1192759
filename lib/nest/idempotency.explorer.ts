import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { IdempotencyConfigurationError, isIdempotencyError, type IdempotencyStore } from '../core/index.js';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { IdempotencyService } from './idempotency.service.js';
import { mergeHandlerOptions, validateIdempotentOptions, type HandlerTransport } from './idempotency.validation.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';
import { RUNTIME_PROPERTY } from './internal.js';
import { declaredHttpMethodOf, declaredTransportOf, isMessageHandler } from './operation.js';
import { resolveMethodConfig, scheduleAdapter, targetOf } from './method-runner.js';
import type { SchedulerRegistryLike } from './schedule.adapter.js';
import { graphqlResolverKindOf } from './graphql-resolver.js';

/**
 * Finds every `@Idempotent()` handler when the application initialises and checks its
 * options against the module it will run with, so that a mistake stops `app.init()` /
 * `app.listen()` with a message naming `Class.method` and the fix, instead of answering
 * the first request with a 500. Also asks each store to `verify()` itself (a missing
 * table, an unsupported driver).
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    @Inject(IdempotencyService) private readonly service: IdempotencyService,
  ) {}

  async onModuleInit(): Promise<void> {
    const where = 'IdempotencyModule.forRoot()';
    try {
      validateIdempotentOptions(where, mergeHandlerOptions(this.service.options, {}), {
        store: this.service.store,
        transport: 'unknown',
        own: {},
      });
    } catch (error) {
      throw this.report(where, error);
    }
    const stores = new Set<IdempotencyStore>([this.service.store]);
    let hasCronJobs = false;
    for (const wrapper of [...this.discovery.getControllers(), ...this.discovery.getProviders()]) {
      const instance = wrapper.instance as Record<string, unknown> | undefined;
      if (!instance || typeof instance !== 'object' || !wrapper.metatype) continue;
      const prototype = Object.getPrototypeOf(instance) as object | null;
      if (!prototype) continue;
      for (const name of this.scanner.getAllMethodNames(prototype)) {
        const method = (prototype as Record<string, unknown>)[name] as Function;
        const options = Reflect.getMetadata(IDEMPOTENT_METADATA, method) as IdempotentOptions | undefined;
        if (!options) continue;
        const handler = `${instance.constructor.name}.${name}`;
        const transport = transportOf(method);
        // Request-scoped and transient classes get their properties per request: only static ones can be checked here.
        const isStatic = wrapper.isDependencyTreeStatic();
        const runtime = instance[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined;
        if (!runtime && isStatic) {
          throw this.report(
            handler,
            new IdempotencyConfigurationError(
              `@Idempotent() on ${handler} cannot find IdempotencyModule: the module that declares ${instance.constructor.name} does not import it.`,
              'Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module, or import IdempotencyModule into that module.',
            ),
          );
        }
        // Handlers served by another IdempotencyModule instance are that module's to check.
        if (runtime && runtime.service !== this.service) continue;
        if (transport === 'unknown') {
          // A method without a request: a provider method, an event listener, a BullMQ processor, a schedule.
          const target = targetOf(method, instance.constructor, name);
          try {
            stores.add(resolveMethodConfig(target, options, this.service).policy.store);
          } catch (error) {
            throw this.report(handler, error);
          }
          hasCronJobs ||= target.kind === 'cron';
          continue;
        }
        const merged = mergeHandlerOptions(this.service.options, options);
        const store = merged.store ?? this.service.store;
        try {
          validateIdempotentOptions(`@Idempotent() on ${handler}`, merged, {
            store,
            transport,
            messageTransport: declaredTransportOf(method),
            own: options,
          });
        } catch (error) {
          throw this.report(handler, error);
        }
        stores.add(store);
      }
    }
    if (hasCronJobs) this.findSchedulerRegistry();
    for (const store of stores) {
      this.service.watchStore(store);
      await this.verify(store);
    }
  }

  /** The application's SchedulerRegistry (@nestjs/schedule), through which a @Cron() tick's scheduled time is read. */
  private findSchedulerRegistry(): void {
    for (const wrapper of this.discovery.getProviders()) {
      const candidate = wrapper.instance as (Partial<SchedulerRegistryLike> & { addCronJob?: unknown }) | undefined;
      if (candidate && typeof candidate.getCronJobs === 'function' && typeof candidate.addCronJob === 'function') {
        scheduleAdapter.useRegistry(candidate as SchedulerRegistryLike);
        return;
      }
    }
  }

  /** A store that can never work stops the boot; one that is only unreachable now is logged (requests get 503 until it answers). */
  private async verify(store: IdempotencyStore): Promise<void> {
    if (typeof store.verify !== 'function') return;
    try {
      await store.verify();
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

function transportOf(method: Function): HandlerTransport {
  if (declaredHttpMethodOf(method) !== undefined) return 'http';
  if (isMessageHandler(method)) return 'message';
  // Mutations are served; queries, subscriptions and field resolvers are refused by validation.
  return graphqlResolverKindOf(method) ?? 'unknown';
}
