import { ConfigurableModuleBuilder } from '@nestjs/common';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.constants.js';
import type { IdempotencyModuleOptions } from './idempotency.module-options.js';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyModule,
  OPTIONS_TYPE: IDEMPOTENCY_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ optionsInjectionToken: IDEMPOTENCY_MODULE_OPTIONS })
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: false }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
