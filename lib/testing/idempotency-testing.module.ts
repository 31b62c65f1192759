import { Module, type DynamicModule } from '@nestjs/common';
import { IdempotencyModule } from '../nest/idempotency.module.js';
import type { IdempotencyModuleOptions } from '../nest/idempotency.module-options.js';

/**
 * For your own unit and e2e tests: provides everything `@Idempotent()` and
 * `IdempotencyService` need, globally, with idempotency switched off by default, so
 * handlers run as if undecorated and no store is touched.
 *
 * @example
 * Test.createTestingModule({ imports: [IdempotencyTestingModule.forRoot()], controllers: [PaymentsController] })
 */
@Module({})
export class IdempotencyTestingModule {
  /** `enabled: true` keeps the real behaviour on a fresh memory store instead. */
  static forRoot(options: IdempotencyModuleOptions = {}): DynamicModule {
    return { module: IdempotencyTestingModule, imports: [IdempotencyModule.forRoot({ enabled: false, ...options, isGlobal: true })] };
  }
}
