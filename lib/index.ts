/**
 * `nestjs-idempotency`: the decorator, the module and what a user writes against them.
 * Features beside the decorator have entry points of their own: `/redis`, `/typeorm`,
 * `/tokens`, `/locks`, `/state-machine`, `/client`, `/testing`, `/prometheus`, `/opentelemetry`,
 * `/terminus` (see docs/api.md). Every name here is a semver promise.
 */

// Nest integration.
export { Idempotent } from './nest/idempotent.decorator.js';
export { IdempotencyModule } from './nest/idempotency.module.js';
export {
  IdempotencyService,
  type RunOptions,
  type RecordLocator,
  type StoredResponse,
  type InspectedRecord,
  type InspectedCompletedRecord,
} from './nest/idempotency.service.js';
export { IdempotencyInterceptor } from './nest/idempotency.interceptor.js';
export { IdempotencyRuntime } from './nest/idempotency.runtime.js';
export { IdempotencyPrincipal, type PrincipalResult } from './nest/principal.js';
export type { IdempotentOptions } from './nest/idempotency.options.js';
export type { IdempotencyModuleOptions, IdempotencyRuntimeClass } from './nest/idempotency.module-options.js';
export type { IdempotentMethodOptions } from './nest/method-options.js';
export type { ResolvedHandlerConfig, TransportAdapter } from './nest/transport.adapter.js';
export { isIdempotencyRpcError, type IdempotencyRpcError } from './nest/transports/rpc/rpc-error.js';

// Stores: the contract for your own, and the embedded default.
export {
  IdempotencyStore,
  type ClaimRequest,
  type CompleteRequest,
  type StoreRequirements,
  type StepRequest,
  type IdempotencyStepStore,
} from './core/store.js';
export type { IdempotencyRecord, ClaimResult } from './core/record.js';
export { MemoryIdempotencyStore } from './core/memory.store.js';

// Plain functions.
export { makeIdempotent, type MakeIdempotentOptions, type IdempotentFunction } from './core/make-idempotent.js';

// The transactional outbox: messages sent once the execution's record completed (docs/outbox.md).
export { IdempotencyOutbox } from './nest/outbox/idempotency-outbox.js';
export type { OutboxRelayOptions } from './core/outbox-relay.js';
export type {
  OutboxMessage,
  StagedOutbox,
  ClaimedOutbox,
  OutboxClaimRequest,
  OutboxSettlement,
  OutboxBacklog,
  IdempotencyOutboxStore,
} from './core/outbox-store.js';

// Durable steps inside any idempotent execution (docs/steps.md).
export { step, stepKey } from './core/steps.js';
export { IdempotencyLeaseLostError } from './core/step-errors.js';

// Events and logs.
export type { IdempotencyEvent, IdempotencyEventType, IdempotencyEventListener } from './core/events.js';
export { createIdempotencyLogger } from './observability/logger.js';
export { combineListeners } from './observability/combine-listeners.js';

// Errors, each with a stable code.
export {
  IdempotencyError,
  IdempotencyErrorCode,
  isIdempotencyError,
  IdempotencyKeyMissingError,
  IdempotencyKeyInvalidError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyNotReplayableError,
  IdempotencyStoreUnavailableError,
  IdempotencyConfigurationError,
  IdempotencyRequestInvalidError,
} from './core/errors.js';
export type { CacheErrors, ErrorClass } from './core/cached-errors.js';
