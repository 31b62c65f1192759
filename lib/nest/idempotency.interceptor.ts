import { Inject, Injectable, Optional, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable, defer } from 'rxjs';
import { IdempotencyConfigurationError } from '../core/errors.js';
import { openFrame, type AnswerFrame } from './answer-frame.js';
import { IDEMPOTENCY_RUNTIME, IDEMPOTENCY_SERVICE, IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotencyHooks } from './idempotency-hooks.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { IdempotencyRuntime } from './idempotency.runtime.js';
import type { PrincipalResult } from './principal.js';
import type { IdempotencyService } from './idempotency.service.js';
import { NO_REPLY, type ResolvedHandlerConfig, type TransportAdapter } from './transport.adapter.js';
import { refuseWithoutModule } from './unconfigured.js';

const HOOKS = ['resolveKey', 'resolveOperation', 'resolvePrincipal', 'fingerprintMaterial'] as const;

/**
 * The outermost layer of `@Idempotent()` handlers: what the caller of a first execution
 * got, after every interceptor of the application (`ClassSerializerInterceptor`, a
 * response-mapping interceptor), is what this interceptor stores; a replay is sent from
 * here, so those interceptors do not map the stored answer again, and nothing they
 * removed reaches the store. The protocol itself runs in `@Idempotent()`'s method
 * wrapper (after guards, pipes and the inner interceptors), which leaves its answer in the
 * request's `AnswerFrame` for this interceptor to settle.
 *
 * `IdempotencyModule` places it first among the global interceptors by itself whenever the
 * application has interceptors around an `@Idempotent()` handler (global, controller or
 * route ones); without any, the wrapper alone answers and no interceptor pipeline runs.
 * Registering it yourself (`APP_INTERCEPTOR`, `useGlobalInterceptors()`) is harmless: the
 * registered instance is the one moved first, and a second registration calls through.
 *
 * Hooks: to derive keys, scopes or fingerprints your own way, subclass
 * `IdempotencyRuntime` and pass it as `IdempotencyModule.forRoot({ runtime })`. A subclass
 * of this interceptor overriding `resolveKey`, `resolveOperation`, `resolvePrincipal` or
 * `fingerprintMaterial`, registered globally, keeps working: its methods apply to the
 * requests it frames, and call the runtime's by default.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  /** @internal the runtime this interceptor serves (undefined when registered without IdempotencyModule) */
  readonly runtime?: IdempotencyRuntime;
  private readonly hooks?: IdempotencyHooks;

  constructor(
    private readonly reflector: Reflector,
    /** @internal the module's service (undefined when registered without IdempotencyModule) */
    @Optional() @Inject(IDEMPOTENCY_SERVICE) readonly service?: IdempotencyService,
    @Optional() @Inject(IDEMPOTENCY_RUNTIME) runtime?: IdempotencyRuntime,
  ) {
    // A subclass calling super(reflector, service) gets a runtime of its own.
    this.runtime = runtime ?? (service ? new IdempotencyRuntime(service) : undefined);
    this.hooks = HOOKS.some((hook) => this[hook] !== IdempotencyInterceptor.prototype[hook]) ? this.ownHooks() : undefined;
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (!this.reflector.get<IdempotentOptions | undefined>(IDEMPOTENT_METADATA, context.getHandler())) return next.handle();
    if (!this.runtime) return defer(() => refuseWithoutModule(context));
    const frame = openFrame(context, this.hooks);
    if (!frame) return next.handle();
    return new Observable<unknown>((subscriber) => {
      let last: unknown = NO_REPLY;
      let ended = false;
      const end = (outcome: { value: unknown } | { error: unknown }) => {
        ended = true;
        void answer(frame, outcome).then(
          (value) => {
            if (value !== NO_REPLY) subscriber.next(value);
            subscriber.complete();
          },
          (error: unknown) => subscriber.error(error),
        );
      };
      const inner = next.handle().subscribe({
        next: (value) => (last = value),
        error: (error: unknown) => end({ error }),
        complete: () => end({ value: last }),
      });
      return () => {
        inner.unsubscribe();
        if (!ended) frame.cancel();
      };
    });
  }

  /** The client key of this request, before validation. */
  protected resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return this.runtimeFor().hooks.resolveKey(context, config, adapter);
  }

  /** The operation part of the scope. */
  protected resolveOperation(context: ExecutionContext, config: ResolvedHandlerConfig): string {
    return this.runtimeFor().hooks.resolveOperation(context, config);
  }

  /** The principal part of the scope. */
  protected resolvePrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): PrincipalResult | Promise<PrincipalResult> {
    return this.runtimeFor().hooks.resolvePrincipal(context, config, adapter);
  }

  /** What must match when a key is reused. */
  protected fingerprintMaterial(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return this.runtimeFor().hooks.fingerprintMaterial(context, config, adapter);
  }

  private runtimeFor(): IdempotencyRuntime {
    if (!this.runtime) {
      throw new IdempotencyConfigurationError(
        `${this.constructor.name} overrides a hook but was created without IdempotencyModule.`,
        'Import IdempotencyModule.forRoot() in the module that registers the interceptor.',
      );
    }
    return this.runtime;
  }

  private ownHooks(): IdempotencyHooks {
    return {
      resolveKey: (context, config, adapter) => this.resolveKey(context, config, adapter),
      resolveOperation: (context, config) => this.resolveOperation(context, config),
      resolvePrincipal: (context, config, adapter) => this.resolvePrincipal(context, config, adapter),
      fingerprintMaterial: (context, config, adapter) => this.fingerprintMaterial(context, config, adapter),
    };
  }
}

/**
 * What the caller gets once the chain inside has ended: a replay the wrapper left in the
 * frame, else the chain's own outcome, stored first when the handler ran under a lease.
 */
async function answer(frame: AnswerFrame, outcome: { value: unknown } | { error: unknown }): Promise<unknown> {
  const replay = frame.replay;
  if (replay) {
    if ('error' in replay) throw replay.error;
    return replay.value;
  }
  const pending = frame.takePending(outcome);
  if ('error' in outcome) {
    if (pending) await pending.error(outcome.error);
    throw outcome.error;
  }
  if (pending) await pending.value(outcome.value);
  return outcome.value;
}
