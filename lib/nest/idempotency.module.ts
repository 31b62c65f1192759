import { Module, type DynamicModule } from '@nestjs/common';
import { ApplicationConfig, DiscoveryModule } from '@nestjs/core';
import { IdempotencyConfigurationError, IdempotencyStore } from '../core/index.js';
import { IDEMPOTENCY_RUNTIME, IDEMPOTENCY_SERVICE } from './idempotency.constants.js';
import {
  ConfigurableIdempotencyModule,
  IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
  IDEMPOTENCY_OPTIONS_TYPE,
} from './idempotency.module-definition.js';
import { IdempotencyExplorer } from './idempotency.explorer.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { IdempotencyRuntime } from './idempotency.runtime.js';
import { IdempotencyService } from './idempotency.service.js';
import { IdempotencyOutbox } from './outbox/idempotency-outbox.js';
import { IdempotencyOpenApi } from './openapi/idempotency-openapi.js';
import { placeOutermost } from './outermost-placement.js';

/** Arranges, while the application is created, that IdempotencyInterceptor runs outside every other interceptor. */
const OUTERMOST_PLACEMENT = Symbol.for('nestjs-idempotency:outermost-placement');

/**
 * Registers the runtime behind `@Idempotent()`, `IdempotencyService` and the store, with
 * `forRoot()` / `forRootAsync()`; checks every `@Idempotent()` handler when the
 * application initialises, and documents its HTTP routes for `@nestjs/swagger` (the
 * `openApi` option).
 *
 * @example
 * IdempotencyModule.forRoot({ isGlobal: true, store: new RedisIdempotencyStore(redis) })
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    IdempotencyExplorer,
    IdempotencyService,
    { provide: IDEMPOTENCY_SERVICE, useExisting: IdempotencyService },
    { provide: IdempotencyStore, useFactory: (service: IdempotencyService) => service.store, inject: [IdempotencyService] },
    { provide: IdempotencyRuntime, useFactory: runtimeOf, inject: [IdempotencyService] },
    { provide: IDEMPOTENCY_RUNTIME, useExisting: IdempotencyRuntime },
    IdempotencyInterceptor,
    IdempotencyOutbox,
    // Built inside NestFactory.create(), before SwaggerModule.createDocument() reads the routes.
    IdempotencyOpenApi,
    {
      provide: OUTERMOST_PLACEMENT,
      useFactory: (config: ApplicationConfig, interceptor: IdempotencyInterceptor) => placeOutermost(config, interceptor),
      inject: [ApplicationConfig, IdempotencyInterceptor],
    },
  ],
  exports: [
    IdempotencyService,
    IDEMPOTENCY_SERVICE,
    IdempotencyStore,
    IdempotencyRuntime,
    IDEMPOTENCY_RUNTIME,
    IdempotencyInterceptor,
    IdempotencyOutbox,
  ],
})
export class IdempotencyModule extends ConfigurableIdempotencyModule {
  /** With no options: a process-local memory store and the defaults of every option. */
  static override forRoot(options: typeof IDEMPOTENCY_OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }

  /** Options from a factory, e.g. a store built from ConfigService. */
  static override forRootAsync(options: typeof IDEMPOTENCY_ASYNC_OPTIONS_TYPE): DynamicModule {
    return super.forRootAsync(options);
  }
}

/** The module's runtime: the `runtime` option's class (hooks of your own), else the library's. */
function runtimeOf(service: IdempotencyService): IdempotencyRuntime {
  const Runtime = service.options.runtime ?? IdempotencyRuntime;
  if (Runtime !== IdempotencyRuntime && !(typeof Runtime === 'function' && Runtime.prototype instanceof IdempotencyRuntime)) {
    throw new IdempotencyConfigurationError(
      `IdempotencyModule.forRoot(): runtime must be a class that extends IdempotencyRuntime, got ${typeof Runtime === 'function' ? Runtime.name || 'a function' : typeof Runtime}.`,
      'Pass runtime: class MyRuntime extends IdempotencyRuntime { ... }, or leave it out.',
    );
  }
  // Checked just above: a subclass of IdempotencyRuntime, built as the runtime is.
  return new (Runtime as typeof IdempotencyRuntime)(service);
}
