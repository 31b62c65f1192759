import type { Type } from '@nestjs/common';
import { IdempotencyConfigurationError, IdempotencyErrorCode, isIdempotencyError } from '../core/index.js';
import { shown } from '../core/options.js';
import { BullMqAdapter } from './bullmq.adapter.js';
import { DirectHandlerCall } from './handler-call.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';
import type { IdempotencyService } from './idempotency.service.js';
import { mergeHandlerOptions, validateIdempotentOptions } from './idempotency.validation.js';
import { RUNTIME_PROPERTY } from './internal.js';
import { MethodExecutionContext } from './method-context.js';
import type { IdempotentMethodOptions } from './method-options.js';
import { isRequestHandler, methodTargetOf, type MethodKind, type MethodTarget } from './method-target.js';
import { MethodAdapter, type MethodHandlerConfig } from './method.adapter.js';
import { ScheduleAdapter } from './schedule.adapter.js';

/** One adapter per kind of method, shared by every module: they hold no per-application state but the scheduler registry. */
export const scheduleAdapter = new ScheduleAdapter();
const ADAPTERS: Record<MethodKind, MethodAdapter> = {
  method: new MethodAdapter(),
  bullmq: new BullMqAdapter(),
  cron: scheduleAdapter,
  interval: scheduleAdapter,
};

/** Options a method without a request has no use for: route headers and RabbitMQ acknowledgement. */
const REQUEST_ONLY_OPTIONS = ['header', 'replayHeaders', 'ack', 'maxDeliveries'] as const;
/** Options of the module that describe requests, never inherited by methods (their `key` reads a request). */
const NOT_INHERITED = ['key', 'scope', 'fingerprint', ...REQUEST_ONLY_OPTIONS] as const;

type MethodOptions = IdempotentOptions | IdempotentMethodOptions;

const targets = new WeakMap<Function, WeakMap<Function, MethodTarget>>();
const configs = new WeakMap<IdempotencyRuntime, WeakMap<Function, WeakMap<Function, MethodHandlerConfig>>>();

/** What the method is (provider method, BullMQ processor, schedule), read once per method and class. */
export function targetOf(handler: Function, owner: Function, propertyName: string): MethodTarget {
  let byOwner = targets.get(handler);
  if (!byOwner) targets.set(handler, (byOwner = new WeakMap()));
  let target = byOwner.get(owner);
  if (!target) byOwner.set(owner, (target = methodTargetOf(handler, owner, propertyName)));
  return target;
}

/**
 * The config a method without a request runs under: its own options over the module's
 * (less the module's request options), validated, with its adapter and policy. Throws an
 * `IdempotencyConfigurationError` that names the method and the fix; the explorer calls
 * it at boot for every such method.
 */
export function resolveMethodConfig(target: MethodTarget, own: MethodOptions, service: IdempotencyService): MethodHandlerConfig {
  const where = `@Idempotent() on ${target.handlerName}`;
  const fail = (problem: string, fix: string): never => {
    throw new IdempotencyConfigurationError(`${where}: ${problem}`, fix);
  };
  if (target.gateway) {
    fail(
      'it is a WebSocket gateway handler (@SubscribeMessage()), which @Idempotent() does not protect: every duplicate message would run it.',
      'Remove @Idempotent() there, and put @Idempotent({ key: (...args) => ... }) on the provider method that performs the effect, called from the handler.',
    );
  }
  const ownRecord = own as Record<string, unknown>;
  for (const name of REQUEST_ONLY_OPTIONS) {
    if (ownRecord[name] !== undefined) {
      fail(
        `${name} does not apply to ${describe(target)}: it has no ${name === 'ack' || name === 'maxDeliveries' ? 'RabbitMQ delivery to acknowledge' : 'HTTP request or response'}.`,
        `Remove ${name} from this @Idempotent().`,
      );
    }
  }
  const { key, scope, fingerprint } = own as IdempotentMethodOptions;
  if (key !== undefined && typeof key !== 'function') {
    fail(
      `key must be a function of the method's arguments, got ${shown(key)}.`,
      'Pass key: (...args) => a string that identifies the operation.',
    );
  }
  if (scope !== undefined && (typeof scope !== 'string' || scope.length === 0)) {
    fail(
      `scope on ${describe(target)} is the name of its operation (a non-empty string), got ${typeof scope === 'function' ? 'a function' : shown(scope)}.`,
      `Pass scope: '${target.operation}' (the default), or put who is asking into the key instead: key: (order) => \`\${order.tenantId}:\${order.id}\`.`,
    );
  }
  if (fingerprint !== undefined && fingerprint !== false && typeof fingerprint !== 'function') {
    fail('fingerprint must be false or a function of the method arguments.', 'Pass fingerprint: (...args) => material, or false.');
  }
  if (key === undefined && target.kind === 'method') {
    fail(
      `${describe(target)} has no request to read an idempotency key from, so it needs a key option; without one every call would run unprotected.`,
      target.events
        ? `Derive the key from the event's payload: @Idempotent({ key: (event: OrderPaid) => event.orderId }).`
        : `Derive the key from the call's arguments: @Idempotent({ key: (refund: RefundRequest) => refund.id }). For an HTTP route, declare the method with @Post() (or @Put(), ...) in a controller instead.`,
    );
  }
  const merged = mergeHandlerOptions(service.options, {});
  for (const name of NOT_INHERITED) delete merged[name];
  for (const [name, value] of Object.entries(own)) if (value !== undefined && !NOT_INHERITED.includes(name as never)) merged[name] = value;
  const store = merged.store ?? service.store;
  validateIdempotentOptions(where, merged, { store, transport: 'unknown', own: {} });
  const adapter = ADAPTERS[target.kind];
  const options: Record<string, unknown> = { ...merged };
  // The runtime hands key and fingerprint functions the context: these hand them the call's arguments.
  if (key) options.key = (context: MethodExecutionContext) => key(...context.getArgs());
  if (fingerprint === false || (fingerprint === undefined && (target.kind === 'cron' || target.kind === 'interval'))) {
    options.fingerprint = false;
  } else if (typeof fingerprint === 'function') {
    options.fingerprint = (context: MethodExecutionContext) => fingerprint(...context.getArgs());
  }
  return {
    handlerName: target.handlerName,
    options: options as MethodHandlerConfig['options'],
    adapter,
    required: merged.required ?? true,
    keyHeaders: [],
    replayHeaders: new Set(),
    target,
    operation: scope ?? target.operation,
    policy: service.policy(target.handlerName, {
      store: merged.store,
      ttl: merged.ttl,
      leaseTtl: merged.leaseTtl,
      inFlight: merged.inFlight ?? adapter.defaultInFlight,
      waitTimeout: merged.waitTimeout,
      // The runtime asks cacheErrors once per failure and fails the lease only for what it selects.
      cacheErrors: merged.cacheErrors ? () => true : undefined,
      onStoreError: merged.onStoreError,
      maxResponseBytes: merged.maxResponseBytes,
    }),
  };
}

function describe(target: MethodTarget): string {
  switch (target.kind) {
    case 'bullmq':
      return `${target.handlerName} (a BullMQ processor)`;
    case 'cron':
    case 'interval':
      return `${target.handlerName} (a scheduled job)`;
    default:
      return target.events
        ? `${target.handlerName} (an @OnEvent('${target.events.join("', '")}') listener)`
        : `${target.handlerName} (a provider method)`;
  }
}

/**
 * `@Idempotent()` on a method called without a request: a provider method, a BullMQ job,
 * an event, a schedule's tick. Runs the protocol with the module's runtime; never runs
 * the method unprotected unless idempotency is switched off (`enabled: false`).
 * A route or message handler called directly by your code is refused: its key comes
 * from the request it never got.
 */
export function callWithoutRequest(
  instance: Record<string, unknown> | undefined,
  handler: Function,
  propertyName: string,
  options: MethodOptions,
  args: unknown[],
  invoke: () => unknown,
): unknown {
  const runtime = instance?.[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined;
  const owner = (instance?.constructor ?? Object) as Type<unknown>;
  const handlerName = `${owner.name}.${propertyName}`;
  if (isRequestHandler(handler)) {
    if (runtime?.service.options.enabled === false) return invoke();
    throw new IdempotencyConfigurationError(
      `@Idempotent() on ${handlerName}: this request handler was called directly, without a request, so there is no idempotency key to protect it with and it would run unprotected.`,
      'In unit tests, build it with Test.createTestingModule({ imports: [IdempotencyTestingModule.forRoot()] }) (idempotency off: it runs as written) or send a request (supertest); ' +
        'in application code, move the effect into a provider method with @Idempotent({ key: (...args) => ... }) and call that.',
    );
  }
  if (!runtime) {
    return Promise.reject(
      new IdempotencyConfigurationError(
        `@Idempotent() on ${handlerName} cannot find IdempotencyModule: ${owner.name} was not created by a Nest module that imports it.`,
        'Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module, and get the instance from Nest (not with new).',
      ),
    );
  }
  if (runtime.service.options.enabled === false) return invoke();
  let config: MethodHandlerConfig;
  try {
    config = configFor(runtime, handler, owner, propertyName, options);
  } catch (error) {
    if (isIdempotencyError(error)) runtime.service.reportConfigurationError(handlerName, error);
    return Promise.reject(error);
  }
  const context = new MethodExecutionContext(args, owner, handler, config.operation);
  const result = runtime.execute(context, config, new DirectHandlerCall(invoke), runtime.hooks);
  if (config.adapter !== scheduleAdapter) return result;
  // Another instance runs this tick: skipped, like a replayed tick (the events still report it).
  return result.catch((error: unknown) => {
    if (isIdempotencyError(error) && error.code === IdempotencyErrorCode.InFlight) return undefined;
    throw error;
  });
}

function configFor(runtime: IdempotencyRuntime, handler: Function, owner: Function, propertyName: string, options: MethodOptions) {
  let byHandler = configs.get(runtime);
  if (!byHandler) configs.set(runtime, (byHandler = new WeakMap()));
  let byOwner = byHandler.get(handler);
  if (!byOwner) byHandler.set(handler, (byOwner = new WeakMap()));
  let config = byOwner.get(owner);
  if (!config) byOwner.set(owner, (config = resolveMethodConfig(targetOf(handler, owner, propertyName), options, runtime.service)));
  return config;
}
