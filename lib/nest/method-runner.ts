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

/**
 * The class each decorated method was last seen on by a boot check, to name it when it is
 * called without its instance (a detached method has no `this` to read the class from).
 * Only for messages: the same in every application that uses the class.
 */
const ownerNames = new WeakMap<Function, string>();

/** What the method is (provider method, BullMQ processor, schedule), read once per method and class. */
export function targetOf(handler: Function, owner: Function, propertyName: string): MethodTarget {
  ownerNames.set(handler, owner.name);
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
  if (scope === undefined && target.namedByClass && target.handlerName.startsWith('.')) {
    fail(
      `its class has no name, so its default scope ('${target.operation}') would not tell it from any other nameless class's method.`,
      `Name the class (class RefundService { ... }), or pass scope: 'refunds.refund' (a name of your own for this operation).`,
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
  const runtime = (instance as Record<string, unknown> | null | undefined)?.[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined;
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
  if (!runtime) return Promise.reject(unconnectedCallError(instance, handler, propertyName));
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

/** `@Idempotent()` on a static method, refused at boot (the explorer) or when called. */
export function staticMethodError(className: string, propertyName: string): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${className}.${propertyName}: it is a static method, which belongs to no instance Nest builds, so IdempotencyModule can never be injected for it and it could never run protected.`,
    `Make ${propertyName} an instance method of an @Injectable() provider and call it on the instance Nest gives you, or wrap the function with makeIdempotent(fn, { store, key }).`,
  );
}

/**
 * Why a method without a request finds no runtime on its `this`, told apart by what
 * `this` is: nothing (a detached method), the class itself (a static method), an object
 * that does not have the method (it was passed as a callback and called on another
 * object), or an instance Nest did not build.
 */
function unconnectedCallError(self: unknown, handler: Function, propertyName: string): IdempotencyConfigurationError {
  const className = ownerNames.get(handler);
  const method = className ? `${className}.${propertyName}` : `${propertyName}()`;
  const detachedFix = `Call it on its instance (service.${propertyName}(...)), or pass a bound function: (...args) => service.${propertyName}(...args), or service.${propertyName}.bind(service).`;
  if (self === undefined || self === null) {
    return new IdempotencyConfigurationError(
      `@Idempotent() on ${method} was called without its instance (\`this\` is ${String(self)}): the method was detached from the object Nest built, e.g. const f = service.${propertyName}; f(), or passed as a callback.`,
      detachedFix,
    );
  }
  if (typeof self === 'function') {
    if ((self as unknown as Record<string, unknown>)[propertyName] === handler)
      return staticMethodError((self as Function).name, propertyName);
    return new IdempotencyConfigurationError(
      `@Idempotent() on ${method} was called on ${(self as Function).name || 'a function'} instead of its instance: the method was detached from the object Nest built and called with another \`this\`.`,
      detachedFix,
    );
  }
  const owner = (self as object).constructor as Function | undefined;
  if ((self as Record<string, unknown>)[propertyName] !== handler) {
    return new IdempotencyConfigurationError(
      `@Idempotent() on ${method} was called on ${describeThis(owner)} instead of its instance: the method was detached from the object Nest built (passed as a callback) and called with another \`this\`.`,
      detachedFix,
    );
  }
  const name = owner?.name || className || 'this';
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${name}.${propertyName} cannot find IdempotencyModule: this ${name} object was not built by Nest's injector (it was created with new, or by a request-scoped useFactory), so nothing connected it to IdempotencyModule.`,
    `Get the instance from Nest (inject ${name}, or app.get(${name})) instead of constructing it, and provide it as a class (providers: [${name}]) or a singleton useFactory / useValue, which IdempotencyModule connects at boot. ` +
      `In unit tests, build it with Test.createTestingModule({ imports: [IdempotencyTestingModule.forRoot()], providers: [${name}] }).`,
  );
}

function describeThis(owner: Function | undefined): string {
  const name = owner?.name;
  if (!name || name === 'Object') return 'a plain object';
  return `${/^[AEIOU]/.test(name) ? 'an' : 'a'} ${name}`;
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
