import { Inject, Injectable, Optional, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable, defer, from, switchMap, catchError, throwError, concatWith, ignoreElements, type Subscription } from 'rxjs';
import {
  IdempotencyConfigurationError,
  IdempotencyKeyMissingError,
  IdempotencyStoreUnavailableError,
  fingerprintOf,
  isIdempotencyError,
  isTransactionalStore,
  normalizeIdempotencyKey,
  serializeOutcome,
  storageKeyOf,
  deserializeOutcome,
  type ExecutionRequest,
  type Lease,
} from '../core/index.js';
import { IDEMPOTENCY_SERVICE, IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { IdempotencyService, scopeOf } from './idempotency.service.js';
import { DEFAULT_REPLAY_HEADERS, HttpTransportAdapter } from './http.adapter.js';
import { RpcTransportAdapter } from './rpc.adapter.js';
import type { ResolvedHandlerConfig, Settlement, TransportAdapter } from './transport.adapter.js';

/** Contexts already handled, so a global registration plus `@Idempotent()` runs the protocol once. */
const handledContexts = new WeakSet<ExecutionContext>();

/**
 * Applies `@Idempotent()` to HTTP and microservice handlers. `@Idempotent()` adds it
 * by itself; registering it globally as well (`APP_INTERCEPTOR`) is harmless, and
 * handlers without `@Idempotent()` pass through untouched.
 *
 * Subclass it to change how keys, scopes or fingerprints are derived for every
 * handler: override `resolveKey`, `resolvePrincipal` or `fingerprintMaterial`.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly configs = new WeakMap<Function, Map<string, ResolvedHandlerConfig>>();
  protected readonly adapters: Record<string, TransportAdapter> = {
    http: new HttpTransportAdapter(),
    rpc: new RpcTransportAdapter(),
  };

  constructor(
    private readonly reflector: Reflector,
    @Optional() @Inject(IDEMPOTENCY_SERVICE) private readonly service?: IdempotencyService,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const handler = context.getHandler();
    const options = this.reflector.get<IdempotentOptions | undefined>(IDEMPOTENT_METADATA, handler);
    if (!options || handledContexts.has(context)) return next.handle();
    handledContexts.add(context);
    const service = this.requireService(context);
    if (service.options.enabled === false) return next.handle();
    const adapter = this.adapters[context.getType()];
    if (!adapter) return next.handle();
    const config = this.configFor(context, options, service, adapter);

    // One hand-written Observable for the whole protocol rather than a chain of rxjs
    // operators: this runs on every request, and each operator layer adds subscribers,
    // closures and promise hops that showed up in profiles (see docs/performance.md).
    return new Observable<unknown>((subscriber) => {
      let closed = false;
      let inner: Subscription | undefined;
      const fail = (error: unknown): void => {
        if (closed) return;
        if (!isIdempotencyError(error)) return subscriber.error(error);
        Promise.resolve(adapter.settle?.(context, config, 'rejected', error)).then(
          () => subscriber.error(adapter.toTransportError(context, error)),
          (settleError: unknown) => subscriber.error(settleError),
        );
      };
      this.start(context, config, adapter, next, service).then(({ source, lease }) => {
        if (closed) {
          // The caller left between the claim and the handler: the handler never ran, but
          // the key is claimed; abandon it like any cancellation (the lease runs out).
          if (lease) {
            lease.abandon();
            void adapter.settle?.(context, config, 'abandoned');
          }
          return;
        }
        inner = source.subscribe({ next: (value) => subscriber.next(value), error: fail, complete: () => subscriber.complete() });
      }, fail);
      return () => {
        closed = true;
        inner?.unsubscribe();
      };
    });
  }

  /** The client key of this request, before validation. Override to read keys your own way. */
  protected async resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): Promise<unknown> {
    return config.options.key ? config.options.key(context) : adapter.readKey(context, config);
  }

  /** The principal part of the scope. Override to scope by tenant, API client, ... */
  protected async resolvePrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): Promise<string | number | undefined | null> {
    return config.options.scope ? config.options.scope(context) : adapter.principal(context);
  }

  /** What must match when a key is reused. */
  protected async fingerprintMaterial(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): Promise<unknown> {
    const custom = config.options.fingerprint;
    return typeof custom === 'function' ? custom(context) : adapter.fingerprintMaterial(context);
  }

  private async prepare(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): Promise<ExecutionRequest | undefined> {
    const raw = await this.resolveKey(context, config, adapter);
    if (raw === undefined || raw === null || raw === '') {
      if (!config.required) return undefined;
      throw new IdempotencyKeyMissingError(adapter.describeKeySource(config, context));
    }
    const clientKey = normalizeIdempotencyKey(raw);
    const principal = await this.resolvePrincipal(context, config, adapter);
    const key = storageKeyOf(scopeOf(config.handlerName, principal), clientKey);
    if (config.options.fingerprint === false) return { key };
    return { key, fingerprint: fingerprintOf(await this.fingerprintMaterial(context, config, adapter)) };
  }

  /** Resolves the key and admits the request: returns what answers it (the handler, a replay, ...). */
  private async start(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    next: CallHandler,
    service: IdempotencyService,
  ): Promise<{ source: Observable<unknown>; lease?: Lease }> {
    let request: ExecutionRequest | undefined;
    try {
      request = await this.prepare(context, config, adapter);
    } catch (error) {
      // A throwing key, scope or fingerprint function still settles the message.
      if (!isIdempotencyError(error)) await adapter.settle?.(context, config, 'failed', error);
      throw error;
    }
    if (!request) return { source: this.settleAfter(context, config, adapter, next.handle()) };
    if (config.options.transactional) return { source: this.runTransactional(context, config, adapter, request, next) };
    const admission = await service.engine.admit(request, config.policy);
    switch (admission.kind) {
      case 'replay':
        return { source: this.afterSettle(context, config, adapter, 'replayed', adapter.replay(context, admission.outcome, config)) };
      case 'unprotected':
        return { source: this.settleAfter(context, config, adapter, next.handle()) };
      default:
        return { source: this.execute(context, config, adapter, admission.lease, next), lease: admission.lease };
    }
  }

  /**
   * Runs the handler under the lease. Its last value is stored before it is passed on,
   * so a response that reached the client is always replayable; an unsubscription
   * before the end abandons the lease instead of releasing it.
   */
  private execute(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    lease: Lease,
    next: CallHandler,
  ): Observable<unknown> {
    return new Observable<unknown>((subscriber) => {
      let finished = false;
      let hasValue = false;
      let last: unknown;
      const subscription = next.handle().subscribe({
        next: (value) => {
          hasValue = true;
          last = value;
        },
        error: (error: unknown) => {
          finished = true;
          const cached = config.policy.cacheErrors?.(error) ?? false;
          lease
            .fail(error, adapter.captureError(context, error, config))
            .then(() => adapter.settle?.(context, config, cached ? 'stored' : 'failed', error))
            .then(
              () => subscriber.error(error),
              () => subscriber.error(error),
            );
        },
        complete: () => {
          finished = true;
          lease
            .complete(adapter.captureValue(context, last, config))
            .then(() => adapter.settle?.(context, config, 'stored'))
            .then(() => {
              if (hasValue) subscriber.next(last);
              subscriber.complete();
            })
            .catch((error: unknown) => subscriber.error(error));
        },
      });
      return () => {
        subscription.unsubscribe();
        if (!finished) {
          lease.abandon();
          void adapter.settle?.(context, config, 'abandoned');
        }
      };
    });
  }

  private runTransactional(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    request: ExecutionRequest,
    next: CallHandler,
  ): Observable<unknown> {
    const store = config.policy.store;
    if (!isTransactionalStore(store)) {
      return throwError(
        () =>
          new IdempotencyConfigurationError(
            `${config.handlerName} uses @Idempotent({ transactional: true }) but its store has no transactions.`,
            'Use a TypeOrmIdempotencyStore from nestjs-idempotency/typeorm as the store of this handler or of the module.',
          ),
      );
    }
    let handlerError: { error: unknown } | undefined;
    return defer(() =>
      store.runTransactional({ key: request.key, fingerprint: request.fingerprint, ttl: config.policy.ttl }, async () => {
        // The handler runs inside the transaction's async context, so it can reach the EntityManager.
        let value: unknown;
        try {
          value = await lastValue(next.handle());
        } catch (error) {
          handlerError = { error };
          throw error;
        }
        return { value, result: serializeOutcome(adapter.captureValue(context, value, config)) };
      }),
    ).pipe(
      switchMap((outcome) =>
        outcome.kind === 'executed'
          ? this.afterSettle(context, config, adapter, 'stored', from([outcome.value]))
          : this.afterSettle(context, config, adapter, 'replayed', adapter.replay(context, deserializeOutcome(outcome.result), config)),
      ),
      catchError((error: unknown) => {
        if (isIdempotencyError(error)) return throwError(() => error);
        // Not the handler's error: the transaction itself failed (connection lost, record
        // statement or commit refused), so nothing committed and the client may retry (503).
        if (handlerError?.error !== error) return throwError(() => new IdempotencyStoreUnavailableError(error));
        return from(Promise.resolve(adapter.settle?.(context, config, 'failed', error))).pipe(switchMap(() => throwError(() => error)));
      }),
    );
  }

  private afterSettle(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    settlement: Settlement,
    source: Observable<unknown>,
  ): Observable<unknown> {
    if (!adapter.settle) return source;
    return from(Promise.resolve(adapter.settle(context, config, settlement))).pipe(switchMap(() => source));
  }

  /**
   * Settles a handler that ran without a lease (no key under `required: false`, or a
   * store failure under fail-open) once it has ended, so a message is acknowledged
   * after its work and never before it.
   */
  private settleAfter(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    source: Observable<unknown>,
  ): Observable<unknown> {
    if (!adapter.settle) return source;
    return source.pipe(
      catchError((error: unknown) =>
        from(Promise.resolve(adapter.settle?.(context, config, 'failed', error))).pipe(switchMap(() => throwError(() => error))),
      ),
      concatWith(defer(() => from(Promise.resolve(adapter.settle?.(context, config, 'unprotected')))).pipe(ignoreElements())),
    );
  }

  private requireService(context: ExecutionContext): IdempotencyService {
    if (this.service) return this.service;
    throw new IdempotencyConfigurationError(
      `@Idempotent() on ${context.getClass().name}.${context.getHandler().name} cannot find IdempotencyModule.`,
      'Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module, or import IdempotencyModule into the module that declares this controller.',
    );
  }

  private configFor(
    context: ExecutionContext,
    options: IdempotentOptions,
    service: IdempotencyService,
    adapter: TransportAdapter,
  ): ResolvedHandlerConfig {
    const handler = context.getHandler();
    let byType = this.configs.get(handler);
    if (!byType) this.configs.set(handler, (byType = new Map()));
    const type = context.getType();
    let config = byType.get(type);
    if (!config) {
      config = resolveConfig(`${context.getClass().name}.${handler.name}`, options, service, adapter);
      byType.set(type, config);
    }
    return config;
  }
}

function resolveConfig(
  handlerName: string,
  handlerOptions: IdempotentOptions,
  service: IdempotencyService,
  adapter: TransportAdapter,
): ResolvedHandlerConfig {
  const { onEvent: _onEvent, enabled: _enabled, ...moduleDefaults } = service.options;
  const options = { ...moduleDefaults, ...stripUndefined(handlerOptions) };
  validateDurations(handlerName, options);
  const header = (options.header ?? 'Idempotency-Key').toLowerCase();
  return {
    handlerName,
    options,
    required: options.required ?? true,
    keyHeaders: header === 'x-idempotency-key' ? [header, 'idempotency-key'] : [header, 'x-idempotency-key'],
    replayHeaders: new Set([...DEFAULT_REPLAY_HEADERS, ...(options.replayHeaders ?? []).map((h) => h.toLowerCase())]),
    policy: service.policy(handlerName, {
      store: options.store,
      ttl: options.ttl,
      leaseTtl: options.leaseTtl,
      inFlight: options.inFlight ?? adapter.defaultInFlight,
      waitTimeout: options.waitTimeout,
      cacheErrors: options.cacheErrors,
      onStoreError: options.onStoreError,
      maxResponseBytes: options.maxResponseBytes,
    }),
  };
}

function validateDurations(handlerName: string, options: IdempotentOptions): void {
  for (const name of ['ttl', 'leaseTtl', 'waitTimeout', 'maxResponseBytes'] as const) {
    const value = options[name];
    if (value !== undefined && (!Number.isFinite(value) || value <= 0)) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${handlerName}: ${name} must be a positive number, got ${String(value)}.`,
        `Give ${name} in milliseconds (bytes for maxResponseBytes), e.g. ttl: 24 * 60 * 60 * 1000.`,
      );
    }
  }
  if (options.inFlight !== undefined && options.inFlight !== 'reject' && options.inFlight !== 'wait') {
    throw new IdempotencyConfigurationError(
      `@Idempotent() on ${handlerName}: inFlight must be 'reject' or 'wait'.`,
      "Use inFlight: 'reject' (409) or 'wait'.",
    );
  }
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function lastValue(source: Observable<unknown>): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let last: unknown;
    source.subscribe({ next: (v) => (last = v), error: reject, complete: () => resolve(last) });
  });
}
