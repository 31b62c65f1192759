import { ConfigurableModuleBuilder, Module, type DynamicModule } from '@nestjs/common';
import { OneTimeTokenGuard } from './one-time-token.guard.js';
import { OneTimeTokenService, type OneTimeTokenServiceOptions } from './one-time-token.service.js';
import { OneTimeTokenStore } from './one-time-token.store.js';

export const ONE_TIME_TOKEN_MODULE_OPTIONS = Symbol.for('nestjs-idempotency:one-time-token-options');

const {
  ConfigurableModuleClass: ConfigurableOneTimeTokenModule,
  OPTIONS_TYPE: ONE_TIME_TOKEN_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: ONE_TIME_TOKEN_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<OneTimeTokenServiceOptions>({ optionsInjectionToken: ONE_TIME_TOKEN_MODULE_OPTIONS })
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: false }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();

/** Options of `OneTimeTokenModule.forRoot()`: the service options plus `isGlobal` (@default false). */
export type OneTimeTokenModuleOptions = typeof ONE_TIME_TOKEN_OPTIONS_TYPE;
/** Options of `OneTimeTokenModule.forRootAsync()`. */
export type OneTimeTokenModuleAsyncOptions = typeof ONE_TIME_TOKEN_ASYNC_OPTIONS_TYPE;

/**
 * Registers `OneTimeTokenService` (inject it to issue tokens), the `OneTimeTokenStore`
 * and the guard behind `@RequireOneTimeToken()`.
 *
 * @example
 * OneTimeTokenModule.forRoot({ isGlobal: true, store: new RedisOneTimeTokenStore(redis), ttl: 10 * 60_000 })
 */
@Module({
  providers: [
    {
      provide: OneTimeTokenService,
      useFactory: (options: OneTimeTokenServiceOptions) => new OneTimeTokenService(options),
      inject: [ONE_TIME_TOKEN_MODULE_OPTIONS],
    },
    { provide: OneTimeTokenStore, useFactory: (service: OneTimeTokenService) => service.store, inject: [OneTimeTokenService] },
    OneTimeTokenGuard,
  ],
  exports: [OneTimeTokenService, OneTimeTokenStore, OneTimeTokenGuard],
})
export class OneTimeTokenModule extends ConfigurableOneTimeTokenModule {
  /** With no options: a process-local memory store and 15-minute tokens. */
  static override forRoot(options: OneTimeTokenModuleOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  /** Options from a factory, e.g. a Redis store built from ConfigService. */
  static override forRootAsync(options: OneTimeTokenModuleAsyncOptions): DynamicModule {
    return super.forRootAsync(options);
  }
}
