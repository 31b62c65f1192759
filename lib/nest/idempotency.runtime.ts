import type { ExecutionContext } from '@nestjs/common';
import { isThenable } from '../core/thenable.js';
// Straight from the defining modules rather than the core barrel: a CommonJS barrel
// reaches every name through a getter, and these run on every request.
import { type ExecutionRequest, type Lease } from '../core/engine.js';
import { runWithoutProtection } from '../core/step-context.js';
import { IdempotencyErrorCode, IdempotencyKeyMissingError, isIdempotencyError, type IdempotencyError } from '../core/errors.js';
import { fingerprintOf, storageKeyOf } from '../core/hash.js';
import { normalizeIdempotencyKey } from '../core/key.js';
import type { StoredOutcome } from '../core/outcome.js';
import { EMPTY } from 'rxjs';
import { abandonLease, frameOf, pendingUnderLease, type AnswerFrame } from './answer-frame.js';
import { HandlerConfigs, resolveHandlerConfig } from './handler-config.js';
import { HandlerCall } from './handler-call.js';
import type { IdempotencyHooks } from './idempotency-hooks.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyService } from './idempotency.service.js';
import { scopeOf } from './operation.js';
import { principalOf, type PrincipalResult } from './principal.js';
import { runTransactional, type ProtocolSteps } from './transactional-run.js';
import { NO_REPLY, type ResolvedHandlerConfig, type TransportAdapter } from './transport.adapter.js';
import { requestTransports, TRANSPORTS } from './transports/registry.js';
import type { Transport } from './transports/transport.js';
import { publicErrorOf, refuseUnconfigured } from './unconfigured.js';

type Principal = PrincipalResult;

/** What the protocol needs of a request; `undefined` when it runs unprotected (no key, `required: false`). */
type Prepared = ExecutionRequest | undefined;

/**
 * The idempotency protocol of `@Idempotent()` handlers (prepare the key, admit, run,
 * settle, replay), one per IdempotencyModule. It runs in `@Idempotent()`'s method
 * wrapper, after guards, pipes and the application's interceptors have seen the request.
 * Where the application has interceptors, `IdempotencyInterceptor` stands outside all of
 * them (see `AnswerFrame`): the answer stored is the one the chain produced, and a replay
 * is sent from there without running them again. Cancellation is the caller
 * unsubscribing before the answer: the key stays leased (never released) until its lease
 * runs out.
 *
 * Extension hooks: `resolveKey`, `resolveOperation`, `resolvePrincipal` and
 * `fingerprintMaterial` are protected methods. Override them in a subclass and pass it
 * as `IdempotencyModule.forRoot({ runtime: MyRuntime })`: every `@Idempotent()` handler
 * of that module uses them, whichever entry point serves it. (A subclass of
 * `IdempotencyInterceptor` that overrides the same methods, registered globally, still
 * works: its hooks apply to the requests it intercepts.)
 *
 * @example
 * class TenantRuntime extends IdempotencyRuntime {
 *   protected override resolvePrincipal(context: ExecutionContext) {
 *     return context.switchToHttp().getRequest().headers['x-tenant-id'];
 *   }
 * }
 * IdempotencyModule.forRoot({ runtime: TenantRuntime })
 */
export class IdempotencyRuntime {
  /** @internal the hooks as the protocol calls them (an interceptor subclass may bring its own) */
  readonly hooks: IdempotencyHooks;
  // The transports Nest reaches with a request, by context type (see transports/registry.ts).
  protected readonly adapters: Record<string, TransportAdapter> = requestTransports();
  /** @internal every handler's config, resolved once (see `resolveHandlerConfig`) */
  readonly configs = new HandlerConfigs();
  /** What the transactional path calls back into (see transactional-run.ts). */
  private readonly steps: ProtocolSteps = {
    handlerFailed: (context, config, call, error) => this.handlerFailed(context, config, call, error),
    transportErrorOf: (context, config, error) => this.transportErrorOf(context, config, error),
    replay: (context, config, outcome, frame) => this.replay(context, config, outcome, frame),
  };

  constructor(
    /** @internal the module's store, engine and options */
    readonly service: IdempotencyService,
  ) {
    // The protected methods below are the hooks: the protocol calls them on the runtime
    // itself, with no forwarding call per request (TypeScript cannot name protected
    // members in an interface, hence the cast).
    this.hooks = this as unknown as IdempotencyHooks;
    for (const transport of TRANSPORTS) transport.attach?.();
  }

  /** The client key of this request, before validation. Override to read keys your own way. */
  protected resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    return config.options.key ? config.options.key(context) : adapter.readKey(context, config);
  }

  /**
   * The operation part of the scope: `POST /v1/refunds/:id` on HTTP, `rmq refund.create`
   * for messages, `graphql Mutation.refund @a` for a GraphQL mutation and its response
   * path (see docs/concepts.md, docs/graphql.md). Keys of two operations never meet.
   */
  protected resolveOperation(context: ExecutionContext, _config: ResolvedHandlerConfig): string {
    return (_config.adapter as Transport).operationOf(context, _config);
  }

  /** The principal part of the scope. Override to scope by tenant, API client, ... */
  protected resolvePrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    adapter: TransportAdapter,
  ): Principal | Promise<Principal> {
    return config.options.scope ? config.options.scope(context) : adapter.principal(context);
  }

  /** What must match when a key is reused. */
  protected fingerprintMaterial(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown {
    const custom = config.options.fingerprint;
    return typeof custom === 'function' ? custom(context) : adapter.fingerprintMaterial(context);
  }

  /**
   * @internal The method wrapper's entry: runs the protocol around `invoke` (the
   * original method), unless an interceptor already runs it for this request.
   */
  handle(context: ExecutionContext, options: IdempotentOptions, invoke: () => unknown): unknown {
    let config: ResolvedHandlerConfig | undefined;
    try {
      config = this.configFor(context, options);
    } catch (refusal) {
      return Promise.reject(refusal);
    }
    if (!config) return invoke();
    const frame = frameOf(context);
    return this.execute(context, config, new HandlerCall(invoke), frame?.hooks ?? this.hooks, frame);
  }

  /**
   * @internal What a request to an `@Idempotent()` handler runs under, resolved once
   * per handler and transport; `undefined` when it runs as if undecorated (the module is
   * disabled, or the transport is one the library does not serve). Throws the
   * transport's refusal when the options cannot be served.
   */
  configFor(context: ExecutionContext, options: IdempotentOptions): ResolvedHandlerConfig | undefined {
    if (this.service.options.enabled === false) return undefined;
    const handler = context.getHandler();
    const type = context.getType();
    let config = this.configs.get(handler, type);
    if (config) return config;
    const adapter = this.adapters[type];
    if (!adapter) return undefined;
    const owner = context.getClass();
    const site = { method: handler, owner, propertyName: handler.name, handlerName: `${owner.name}.${handler.name}` };
    try {
      config = resolveHandlerConfig(this.service, adapter as Transport, site, options);
    } catch (error) {
      throw refuseUnconfigured(context, adapter, error, this.service);
    }
    this.configs.set(handler, type, config);
    return config;
  }

  /**
   * @internal The whole protocol for one request or message: what answers it (the
   * handler's value, a replay, `NO_REPLY`), or the error to raise. This library's errors,
   * its refusals as well as those the handler throws (`OptimisticLockError`, ...), reach
   * the caller in the transport's form (problem body, RpcException), each settled once.
   */
  async execute(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    call: HandlerCall,
    hooks: IdempotencyHooks,
    frame?: AnswerFrame,
  ): Promise<unknown> {
    const adapter = config.adapter;
    let request: ExecutionRequest | undefined;
    try {
      try {
        if (adapter.admit) await adapter.admit(context, config);
        const prepared = this.prepare(context, config, hooks);
        request = isThenable(prepared) ? await prepared : prepared;
      } catch (error) {
        // A throwing key, scope or fingerprint function still settles the message.
        if (!isIdempotencyError(error)) await adapter.settle?.(context, config, 'failed', error);
        throw error;
      }
      if (!request) return await this.runUnprotected(context, config, call);
      if (config.options.transactional) return await runTransactional(this.steps, context, config, request, call, frame);
      const admission = await this.service.engine.admit(request, config.policy);
      switch (admission.kind) {
        case 'replay':
          if (adapter.settle) await adapter.settle(context, config, 'replayed');
          return this.replay(context, config, admission.outcome, frame);
        case 'unprotected':
          return await this.runUnprotected(context, config, call, true);
        default:
          return await this.runLeased(context, config, admission.lease, call, frame);
      }
    } catch (error) {
      // The handler's own errors arrive here settled already, in the form they answer in.
      if (call.failed || !isIdempotencyError(error)) throw error;
      await adapter.settle?.(context, config, 'rejected', error);
      throw this.transportErrorOf(context, config, error);
    }
  }

  /**
   * The request's key and fingerprint. The hooks may be async; most are not, and an
   * await costs every request a hop: this stays synchronous until a hook returns a
   * promise, and continues after it from there (each hook runs once).
   */
  private prepare(context: ExecutionContext, config: ResolvedHandlerConfig, hooks: IdempotencyHooks): Prepared | Promise<Prepared> {
    const raw = hooks.resolveKey(context, config, config.adapter);
    if (isThenable(raw)) return Promise.resolve(raw).then((value) => this.prepareFromKey(context, config, hooks, value));
    return this.prepareFromKey(context, config, hooks, raw);
  }

  private prepareFromKey(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    hooks: IdempotencyHooks,
    raw: unknown,
  ): Prepared | Promise<Prepared> {
    const adapter = config.adapter;
    if (raw === undefined || raw === null || raw === '') {
      if (!config.required) return undefined;
      throw new IdempotencyKeyMissingError(adapter.describeKeySource(config, context));
    }
    const clientKey = normalizeIdempotencyKey(raw);
    const principal = hooks.resolvePrincipal(context, config, adapter);
    if (isThenable(principal)) {
      return Promise.resolve(principal).then((value) => this.prepareFromPrincipal(context, config, hooks, clientKey, value));
    }
    return this.prepareFromPrincipal(context, config, hooks, clientKey, principal);
  }

  private prepareFromPrincipal(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    hooks: IdempotencyHooks,
    clientKey: string,
    principal: Principal,
  ): Prepared | Promise<Prepared> {
    const key = storageKeyOf(scopeOf(hooks.resolveOperation(context, config), principalOf(principal, config.handlerName)), clientKey);
    if (config.options.fingerprint === false) return { key };
    const material = hooks.fingerprintMaterial(context, config, config.adapter);
    if (isThenable(material)) return Promise.resolve(material).then((value) => ({ key, fingerprint: fingerprintOf(value) }));
    return { key, fingerprint: fingerprintOf(material) };
  }

  /**
   * A stored outcome, as the transport replays it (an HTTP replay is synchronous: no extra
   * hop). Under a frame it is handed to the outermost layer, and the chain inside ends
   * without a value (`EMPTY`), so no interceptor of the application maps it again.
   */
  private replay(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    outcome: StoredOutcome,
    frame: AnswerFrame | undefined,
  ): unknown {
    if (frame) return this.replayToFrame(context, config, outcome, frame);
    // Nothing to send back (an event's duplicate) answers `undefined`, as the handler would.
    const answer = config.adapter.replay(context, outcome, config);
    if (isThenable(answer)) return Promise.resolve(answer).then((value) => (value === NO_REPLY ? undefined : value));
    return answer === NO_REPLY ? undefined : answer;
  }

  private async replayToFrame(context: ExecutionContext, config: ResolvedHandlerConfig, outcome: StoredOutcome, frame: AnswerFrame) {
    try {
      frame.replay = { value: await config.adapter.replay(context, outcome, config) };
    } catch (error) {
      frame.replay = { error };
    }
    return EMPTY;
  }

  /**
   * Runs the handler under the lease. Its value is stored before it is passed on, so a
   * response that reached the client is always replayable; a cancellation before the
   * end abandons the lease instead of releasing it.
   */
  private async runLeased(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    lease: Lease,
    call: HandlerCall,
    frame: AnswerFrame | undefined,
  ): Promise<unknown> {
    const adapter = config.adapter;
    if (frame?.cancelled) {
      // The caller left between the claim and the handler: the handler never ran, but
      // the key is claimed; abandon it like any cancellation (the lease runs out).
      abandonLease(context, config, lease);
      return undefined;
    }
    let value: unknown;
    let abandoned = false;
    if (frame) {
      // The caller may go away while the handler runs: stop it, and keep the key leased.
      frame.onCancel = () => {
        abandoned = true;
        call.stop();
        abandonLease(context, config, lease);
      };
    }
    try {
      // In the lease's own context: step() and the outgoing client find this execution
      // there, and nothing of it reaches the caller's context (an outer handler, the connection).
      value = await lease.run(() => call.run());
    } catch (error) {
      if (abandoned) throw error;
      if (frame) frame.onCancel = undefined;
      const answer = await this.handlerFailed(context, config, call, error);
      const cached = Boolean(config.policy.cacheErrors?.(error));
      if (cached && frame) {
        // The error the caller gets is the one the chain ends in: stored from there.
        frame.settleWith(pendingUnderLease(context, config, lease, true));
        throw answer;
      }
      try {
        // The first caller and every replay get the same answer: the one stored here.
        if (cached) await lease.storeError(adapter.captureError(context, answer, config));
        else await lease.release();
        await adapter.settle?.(context, config, cached ? 'stored' : 'failed', error);
      } catch {
        // The handler's error is the answer; the lease reports its own store errors.
      }
      throw answer;
    }
    if (frame) {
      frame.onCancel = undefined;
      if (!abandoned) frame.settleWith(pendingUnderLease(context, config, lease, false));
      return value;
    }
    await lease.complete(adapter.captureValue(context, value === NO_REPLY ? undefined : value, config));
    // Not `await adapter.settle?.()`: awaiting nothing still costs every HTTP request a tick.
    if (adapter.settle) await adapter.settle(context, config, 'stored');
    return value;
  }

  /**
   * A handler that runs without a lease (no key under `required: false`, or a store
   * failure under fail-open) is settled once it has ended, so a message is
   * acknowledged after its work and never before it.
   */
  private async runUnprotected(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    call: HandlerCall,
    outage = false,
  ): Promise<unknown> {
    const adapter = config.adapter;
    // Through an outage, step() is refused (never run unrecorded); without a key it is outside any execution.
    const run = () => (outage ? runWithoutProtection(() => call.run()) : call.run());
    if (!adapter.settle) return run();
    let value: unknown;
    try {
      value = await run();
    } catch (error) {
      const answer = await this.handlerFailed(context, config, call, error);
      await adapter.settle(context, config, 'failed', error);
      throw answer;
    }
    await adapter.settle(context, config, 'unprotected');
    return value;
  }

  /**
   * The handler threw: marks the call failed (so nothing settles it again) and returns
   * what the caller gets instead of `error`.
   */
  private handlerFailed(
    context: ExecutionContext,
    config: ResolvedHandlerConfig,
    call: HandlerCall,
    error: unknown,
  ): Promise<unknown> | unknown {
    call.failed = true;
    return isIdempotencyError(error) ? this.answerOf(context, config, error) : error;
  }

  /**
   * What the caller gets when the handler throws one of this library's errors (from
   * locks, tokens, optimistic updates): its transport's form, as for a refusal. Any
   * other error reaches the application's exception filters as it is.
   */
  private async answerOf(context: ExecutionContext, config: ResolvedHandlerConfig, error: IdempotencyError): Promise<unknown> {
    if (config.adapter.prepareErrors) await config.adapter.prepareErrors();
    return this.transportErrorOf(context, config, error);
  }

  private transportErrorOf(context: ExecutionContext, config: ResolvedHandlerConfig, error: IdempotencyError): unknown {
    if (error.code === IdempotencyErrorCode.Configuration) this.service.reportConfigurationError(config.handlerName, error);
    // A request's caller is a client, told the class of a configuration error only; a method's is the application's own code.
    const remote = (config.adapter as Partial<Transport>).reach === 'request';
    return config.adapter.toTransportError(context, remote ? publicErrorOf(error, this.service.options.exposeConfigurationErrors) : error);
  }
}
