import { Inject, Injectable, Optional, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { Observable, isObservable, throwError, type Subscription } from 'rxjs';
import {
  IdempotencyConfigurationError,
  IdempotencyErrorCode,
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
  type StoredOutcome,
  type Lease,
} from '../core/index.js';
import { IDEMPOTENCY_SERVICE, IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import { IdempotencyService, scopeOf } from './idempotency.service.js';
import { DEFAULT_REPLAY_HEADERS, HttpTransportAdapter } from './http.adapter.js';
import { RpcTransportAdapter } from './rpc.adapter.js';
import { operationOf } from './operation.js';
import { principalOf } from './principal.js';
import { mergeHandlerOptions, validateIdempotentOptions } from './idempotency.validation.js';
import { missingModuleError, refuseUnconfigured, refuseWithoutModule } from './unconfigured.js';
import { NO_REPLY, type ResolvedHandlerConfig, type TransportAdapter } from './transport.adapter.js';

/** Contexts already handled, so a global registration plus a method-level one runs the protocol once. */
const handledContexts = new WeakSet<ExecutionContext>();
/**
 * Requests (messages) whose protocol an interceptor already runs, so the method wrapper
 * of `@Idempotent()` underneath it calls straight through instead of running it again.
 */
const handledCarriers = new WeakSet<object>();

/** The handler's side of one execution: how to run it, and whether its caller went away. */
interface HandlerCall {
  readonly cancelled: boolean;
  /** What to answer when there is nothing to send back. */
  readonly noReply: unknown;
  /** Set once the key is claimed, so that a cancellation can abandon it. */
  lease?: Lease;
  /** Runs the handler; resolves with its last value (`NO_REPLY` when it produced none). */
  run(): Promise<unknown>;
}

/** A handler reached through Nest's interceptor chain (`next.handle()`), which may be cancelled. */
class ObservableHandlerCall implements HandlerCall {
  cancelled = false;
  readonly noReply = NO_REPLY;
  finished = false;
  lease?: Lease;
  private subscription?: Subscription;

  constructor(private readonly next: CallHandler) {}

  run(): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let last: unknown = NO_REPLY;
      this.subscription = this.next.handle().subscribe({
        next: (value) => (last = value),
        error: (error: unknown) => {
          this.finished = true;
          reject(error);
        },
        complete: () => {
          this.finished = true;
          resolve(last);
        },
      });
    });
  }

  /** The caller unsubscribed: stop the handler, and keep its key leased (the outcome is unknown). */
  cancel(onAbandon: () => void): void {
    this.cancelled = true;
    this.subscription?.unsubscribe();
    if (this.lease && !this.finished) {
      this.lease.abandon();
      onAbandon();
    }
  }
}

/** A handler called by the method wrapper of `@Idempotent()`: nothing cancels it. */
class DirectHandlerCall implements HandlerCall {
  readonly cancelled = false;
  readonly noReply = undefined;
  lease?: Lease;

  constructor(private readonly invoke: () => unknown) {}

  run(): Promise<unknown> {
    try {
      const result = this.invoke();
      if (!isObservable(result)) return Promise.resolve(result);
      // A handler may return an Observable: its last value answers, as in Nest.
      return new ObservableHandlerCall({ handle: () => result }).run().then((value) => (value === NO_REPLY ? undefined : value));
    } catch (error) {
      return Promise.reject(error);
    }
  }
}

/**
 * Runs the idempotency protocol around handlers. `@Idempotent()` does not need it
 * registered: the decorator wraps the method and calls into the module's instance, which
 * spares every request Nest's interceptor pipeline. Registering it (globally with
 * `APP_INTERCEPTOR`, or with `@UseInterceptors()`) is harmless: the protocol runs once,
 * in the outermost place.
 *
 * Subclass it to change how keys, scopes or fingerprints are derived for every
 * handler (override `resolveKey`, `resolvePrincipal` or `fingerprintMaterial`) and
 * register the subclass globally (`APP_INTERCEPTOR`): it then runs the protocol of every
 * `@Idempotent()` handler, and the method wrapper calls straight through.
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
    /** @internal the module's runtime this interceptor serves (undefined when registered without IdempotencyModule) */
    @Optional() @Inject(IDEMPOTENCY_SERVICE) readonly service?: IdempotencyService,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const handler = context.getHandler();
    const options = this.reflector.get<IdempotentOptions | undefined>(IDEMPOTENT_METADATA, handler);
    if (!options || handledContexts.has(context)) return next.handle();
    handledContexts.add(context);
    const adapter = this.adapters[context.getType()];
    if (!this.service) return throwError(() => refuseUnconfigured(context, adapter, missingModuleError(context)));
    const service = this.service;
    if (service.options.enabled === false || !adapter) return next.handle();
    let config: ResolvedHandlerConfig;
    try {
      config = this.configFor(context, options, service, adapter);
    } catch (error) {
      return throwError(() => refuseUnconfigured(context, adapter, error, service));
    }
    const carrier = carrierOf(context);
    if (carrier) handledCarriers.add(carrier);

    return new Observable<unknown>((subscriber) => {
      const call = new ObservableHandlerCall(next);
      this.process(context, config, adapter, service, call).then(
        (value) => {
          if (call.cancelled) return;
          if (value !== NO_REPLY) subscriber.next(value);
          subscriber.complete();
        },
        (error: unknown) => {
          if (!call.cancelled) subscriber.error(error);
        },
      );
      return () => call.cancel(() => void adapter.settle?.(context, config, 'abandoned'));
    });
  }

  /**
   * @internal The entry point of `@Idempotent()`'s method wrapper: runs the protocol
   * around `invoke` (the original method), unless an interceptor already does.
   */
  runHandler(context: ExecutionContext, options: IdempotentOptions, invoke: () => unknown): unknown {
    const carrier = carrierOf(context);
    if (carrier && handledCarriers.has(carrier)) return invoke();
    const service = this.service;
    const adapter = this.adapters[context.getType()];
    if (!service) return refuseWithoutModule(context);
    if (service.options.enabled === false || !adapter) return invoke();
    let config: ResolvedHandlerConfig;
    try {
      config = this.configFor(context, options, service, adapter);
    } catch (error) {
      return Promise.reject(refuseUnconfigured(context, adapter, error, service));
    }
    return this.process(context, config, adapter, service, new DirectHandlerCall(invoke));
  }

  /** The client key of this request, before validation. Override to read keys your own way. */
  protected resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return config.options.key ? config.options.key(context) : adapter.readKey(context, config);
  }

  /**
   * The operation part of the scope: `POST /v1/refunds/:id` on HTTP, `rmq refund.create`
   * for messages (see docs/concepts.md). Keys of two operations never meet.
   */
  protected resolveOperation(context: ExecutionContext, _config: ResolvedHandlerConfig): string {
    return operationOf(context);
  }

  /** The principal part of the scope. Override to scope by tenant, API client, ... */
  protected resolvePrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): string | number | undefined | null | Promise<string | number | undefined | null> {
    return config.options.scope ? config.options.scope(context) : adapter.principal(context);
  }

  /** What must match when a key is reused. */
  protected fingerprintMaterial(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    const custom = config.options.fingerprint;
    return typeof custom === 'function' ? custom(context) : adapter.fingerprintMaterial(context);
  }

  /** The hooks above may be async; most are not, and an await costs every request a hop. */
  private async prepare(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): Promise<ExecutionRequest | undefined> {
    let raw = this.resolveKey(context, config, adapter);
    if (isThenable(raw)) raw = await raw;
    if (raw === undefined || raw === null || raw === '') {
      if (!config.required) return undefined;
      throw new IdempotencyKeyMissingError(adapter.describeKeySource(config, context));
    }
    const clientKey = normalizeIdempotencyKey(raw);
    let principal = this.resolvePrincipal(context, config, adapter);
    if (isThenable(principal)) principal = await principal;
    const key = storageKeyOf(scopeOf(this.resolveOperation(context, config), principalOf(principal, config.handlerName)), clientKey);
    if (config.options.fingerprint === false) return { key };
    let material = this.fingerprintMaterial(context, config, adapter);
    if (isThenable(material)) material = await material;
    return { key, fingerprint: fingerprintOf(material) };
  }

  /**
   * The whole protocol for one request or message: what answers it (the handler's value,
   * a replay, `NO_REPLY`), or the error to raise. Refusals by this library become the
   * transport's errors (problem responses, RpcExceptions) after the message is settled.
   */
  private async process(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    service: IdempotencyService,
    call: HandlerCall,
  ): Promise<unknown> {
    let request: ExecutionRequest | undefined;
    try {
      try {
        if (adapter.admit) await adapter.admit(context, config);
        request = await this.prepare(context, config, adapter);
      } catch (error) {
        // A throwing key, scope or fingerprint function still settles the message.
        if (!isIdempotencyError(error)) await adapter.settle?.(context, config, 'failed', error);
        throw error;
      }
      if (!request) return await this.runUnprotected(context, config, adapter, call);
      if (config.options.transactional) return await this.runTransactional(context, config, adapter, request, call);
      const admission = await service.engine.admit(request, config.policy);
      switch (admission.kind) {
        case 'replay':
          if (adapter.settle) await adapter.settle(context, config, 'replayed');
          return this.replay(context, config, adapter, admission.outcome, call);
        case 'unprotected':
          return await this.runUnprotected(context, config, adapter, call);
        default:
          return await this.runLeased(context, config, adapter, admission.lease, call);
      }
    } catch (error) {
      if (!isIdempotencyError(error) || call.cancelled) throw error;
      if (error.code === IdempotencyErrorCode.Configuration) service.reportConfigurationError(config.handlerName, error);
      await adapter.settle?.(context, config, 'rejected', error);
      throw adapter.toTransportError(context, error);
    }
  }

  /** A stored outcome, as the transport replays it (an HTTP replay is synchronous: no extra hop). */
  private replay(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    outcome: StoredOutcome,
    call: HandlerCall,
  ): unknown {
    const answer = adapter.replay(context, outcome, config);
    if (isThenable(answer)) return Promise.resolve(answer).then((value) => (value === NO_REPLY ? call.noReply : value));
    return answer === NO_REPLY ? call.noReply : answer;
  }

  /**
   * Runs the handler under the lease. Its value is stored before it is passed on, so a
   * response that reached the client is always replayable; a cancellation before the
   * end abandons the lease instead of releasing it.
   */
  private async runLeased(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    lease: Lease,
    call: HandlerCall,
  ): Promise<unknown> {
    call.lease = lease;
    if (call.cancelled) {
      // The caller left between the claim and the handler: the handler never ran, but
      // the key is claimed; abandon it like any cancellation (the lease runs out).
      lease.abandon();
      void adapter.settle?.(context, config, 'abandoned');
      return call.noReply;
    }
    let value: unknown;
    try {
      value = await call.run();
    } catch (error) {
      const cached = config.policy.cacheErrors?.(error) ?? false;
      try {
        await lease.fail(error, adapter.captureError(context, error, config));
        await adapter.settle?.(context, config, cached ? 'stored' : 'failed', error);
      } catch {
        // The handler's error is the answer; the lease reports its own store errors.
      }
      throw error;
    }
    await lease.complete(adapter.captureValue(context, value === NO_REPLY ? undefined : value, config));
    await adapter.settle?.(context, config, 'stored');
    return value;
  }

  private async runTransactional(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    request: ExecutionRequest,
    call: HandlerCall,
  ): Promise<unknown> {
    const store = config.policy.store;
    if (!isTransactionalStore(store)) {
      throw new IdempotencyConfigurationError(
        `${config.handlerName} uses @Idempotent({ transactional: true }) but its store has no transactions.`,
        'Use a TypeOrmIdempotencyStore from nestjs-idempotency/typeorm as the store of this handler or of the module.',
      );
    }
    let handlerError: { error: unknown } | undefined;
    let outcome;
    try {
      outcome = await store.runTransactional({ key: request.key, fingerprint: request.fingerprint, ttl: config.policy.ttl }, async () => {
        // The handler runs inside the transaction's async context, so it can reach the EntityManager.
        let value: unknown;
        try {
          value = await call.run();
        } catch (error) {
          handlerError = { error };
          throw error;
        }
        const stored = value === NO_REPLY ? undefined : value;
        return { value, result: serializeOutcome(adapter.captureValue(context, stored, config)) };
      });
    } catch (error) {
      if (isIdempotencyError(error)) throw error;
      // Not the handler's error: the transaction itself failed (connection lost, record
      // statement or commit refused), so nothing committed and the client may retry (503).
      if (handlerError?.error !== error) throw new IdempotencyStoreUnavailableError(error);
      await adapter.settle?.(context, config, 'failed', error);
      throw error;
    }
    if (outcome.kind === 'executed') {
      await adapter.settle?.(context, config, 'stored');
      return outcome.value;
    }
    await adapter.settle?.(context, config, 'replayed');
    return this.replay(context, config, adapter, deserializeOutcome(outcome.result), call);
  }

  /**
   * A handler that runs without a lease (no key under `required: false`, or a store
   * failure under fail-open) is settled once it has ended, so a message is
   * acknowledged after its work and never before it.
   */
  private async runUnprotected(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
    call: HandlerCall,
  ): Promise<unknown> {
    if (!adapter.settle) return call.run();
    let value: unknown;
    try {
      value = await call.run();
    } catch (error) {
      await adapter.settle(context, config, 'failed', error);
      throw error;
    }
    await adapter.settle(context, config, 'unprotected');
    return value;
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

/** The object that stands for one request or message: the HTTP request, the transport's message context. */
function carrierOf(context: ExecutionContext): object | undefined {
  const args = typeof context.getArgs === 'function' ? context.getArgs() : undefined;
  if (!args) return undefined;
  const candidate: unknown = context.getType() === 'http' ? args[0] : (args[1] ?? args[0]);
  return typeof candidate === 'object' && candidate !== null ? candidate : undefined;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** The options of one handler merged over the module's, validated, with everything a request needs precomputed. */
function resolveConfig(
  handlerName: string,
  handlerOptions: IdempotentOptions,
  service: IdempotencyService,
  adapter: TransportAdapter,
): ResolvedHandlerConfig {
  const options = mergeHandlerOptions(service.options, handlerOptions);
  validateIdempotentOptions(`@Idempotent() on ${handlerName}`, options, {
    store: options.store ?? service.store,
    transport: adapter instanceof HttpTransportAdapter ? 'http' : 'message',
    own: handlerOptions,
  });
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
