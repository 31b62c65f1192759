import { SetMetadata, UseInterceptors, applyDecorators } from '@nestjs/common';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import type { IdempotentOptions } from './idempotency.options.js';

/**
 * Makes a controller method or message handler idempotent: the first request with a
 * key runs it and stores the result; duplicates get that result replayed. Options
 * override the defaults of `IdempotencyModule.forRoot()`.
 *
 * @example
 * @Post('refunds')
 * @Idempotent({ ttl: 24 * 60 * 60 * 1000 })
 * refund(@Body() dto: RefundDto) { ... }
 */
export function Idempotent(options: IdempotentOptions = {}): MethodDecorator {
  return applyDecorators(SetMetadata(IDEMPOTENT_METADATA, options), UseInterceptors(IdempotencyInterceptor));
}
