import { Inject, Injectable, Optional, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable, defer, throwError } from 'rxjs';
import { IDEMPOTENCY_RUNTIME, IDEMPOTENCY_SERVICE, IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { IdempotencyRuntime, claimForInterceptor, type IdempotencyHooks } from './idempotency.runtime.js';
import type { IdempotencyService } from './idempotency.service.js';
import { ObservableHandlerCall } from './handler-call.js';
import { NO_REPLY, type ResolvedHandlerConfig, type TransportAdapter } from './transport.adapter.js';
import { refuseWithoutModule } from './unconfigured.js';

const HOOKS = ['resolveKey', 'resolveOperation', 'resolvePrincipal', 'fingerprintMaterial'] as const;

/**
 * Nest's interceptor form of `@Idempotent()`: an adapter onto the module's
 * `IdempotencyRuntime`, answering and settling exactly as the decorator's method
 * wrapper does. `@Idempotent()` does not need it registered (the wrapper spares every
 * request Nest's interceptor pipeline); registering it (globally with
 * `APP_INTERCEPTOR`, or with `@UseInterceptors()`) is harmless: the protocol runs once,
 * in the outermost place, and the wrapper calls straight through.
 *
 * Hooks: to derive keys, scopes or fingerprints your own way, subclass
 * `IdempotencyRuntime` and pass it as `IdempotencyModule.forRoot({ runtime })`, which
 * serves both entry points. A subclass of this interceptor overriding `resolveKey`,
 * `resolveOperation`, `resolvePrincipal` or `fingerprintMaterial`, registered globally,
 * keeps working: its methods apply to the requests it intercepts, and call the
 * runtime's by default.
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
    this.hooks = HOOKS.some((hook) => this[hook] !== IdempotencyInterceptor.prototype[hook]) ? this.ownHooks() : this.runtime?.hooks;
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const options = this.reflector.get<IdempotentOptions | undefined>(IDEMPOTENT_METADATA, context.getHandler());
    if (!options || !claimForInterceptor(context)) return next.handle();
    const runtime = this.runtime;
    if (!runtime) return defer(() => refuseWithoutModule(context));
    let config: ResolvedHandlerConfig | undefined;
    try {
      config = runtime.configFor(context, options);
    } catch (refusal) {
      return throwError(() => refusal);
    }
    if (!config) return next.handle();
    const served = config;
    return new Observable<unknown>((subscriber) => {
      const call = new ObservableHandlerCall(next);
      runtime.execute(context, served, call, this.hooks!).then(
        (value) => {
          if (call.cancelled) return;
          if (value !== NO_REPLY) subscriber.next(value);
          subscriber.complete();
        },
        (error: unknown) => {
          if (!call.cancelled) subscriber.error(error);
        },
      );
      return () => runtime.cancel(context, served, call);
    });
  }

  /** The client key of this request, before validation. */
  protected resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return this.runtime!.hooks.resolveKey(context, config, adapter);
  }

  /** The operation part of the scope. */
  protected resolveOperation(context: ExecutionContext, config: ResolvedHandlerConfig): string {
    return this.runtime!.hooks.resolveOperation(context, config);
  }

  /** The principal part of the scope. */
  protected resolvePrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): string | number | undefined | null | Promise<string | number | undefined | null> {
    return this.runtime!.hooks.resolvePrincipal(context, config, adapter);
  }

  /** What must match when a key is reused. */
  protected fingerprintMaterial(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return this.runtime!.hooks.fingerprintMaterial(context, config, adapter);
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
