import { Module, type DynamicModule } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { IdempotencyStore } from '../core/index.js';
import { IDEMPOTENCY_INTERCEPTOR, IDEMPOTENCY_SERVICE } from './idempotency.constants.js';
import {
  ConfigurableIdempotencyModule,
  IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
  IDEMPOTENCY_OPTIONS_TYPE,
} from './idempotency.module-definition.js';
import { IdempotencyExplorer } from './idempotency.explorer.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { IdempotencyService } from './idempotency.service.js';

/**
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
    IdempotencyInterceptor,
    { provide: IDEMPOTENCY_INTERCEPTOR, useExisting: IdempotencyInterceptor },
  ],
  exports: [IdempotencyService, IDEMPOTENCY_SERVICE, IdempotencyStore, IdempotencyInterceptor, IDEMPOTENCY_INTERCEPTOR],
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
