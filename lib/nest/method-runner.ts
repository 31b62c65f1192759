import type { Type } from '@nestjs/common';
import { IdempotencyConfigurationError, isIdempotencyError } from '../core/errors.js';
import { resolveHandlerConfig } from './handler-config.js';
import { HandlerCall } from './handler-call.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';
import { RUNTIME_PROPERTY } from './internal.js';
import type { IdempotentMethodOptions } from './method-options.js';
import { MethodExecutionContext } from './transports/method/method-context.js';
import { ownerNameOf } from './transports/method/method-target.js';
import type { MethodAdapter, MethodHandlerConfig } from './transports/method/method.adapter.js';
import { isRequestHandler, transportFor } from './transports/registry.js';

type MethodOptions = IdempotentOptions | IdempotentMethodOptions;

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
  if (isRequestHandler(handler, owner, propertyName, handlerName)) {
    if (runtime?.service.options.enabled === false) return invoke();
    throw new IdempotencyConfigurationError(
      `@Idempotent() on ${handlerName}: this request handler was called directly, without a request, so there is no idempotency key to protect it with and it would run unprotected.`,
      'In unit tests, build it with Test.createTestingModule({ imports: [IdempotencyTestingModule.forRoot()] }) (idempotency off: it runs as written) or send a request (supertest); ' +
        'in application code, move the effect into a provider method with @Idempotent({ key: (...args) => ... }) and call that.',
    );
  }
  if (!runtime) return Promise.reject(unconnectedCallError(instance, handler, propertyName));
  if (runtime.service.options.enabled === false) return invoke();
  let config = runtime.configs.get(handler, owner) as MethodHandlerConfig | undefined;
  if (!config) {
    try {
      const site = { method: handler, owner, propertyName, handlerName };
      config = resolveHandlerConfig(runtime.service, transportFor(site), site, options as IdempotentOptions) as MethodHandlerConfig;
    } catch (error) {
      if (isIdempotencyError(error)) runtime.service.reportConfigurationError(handlerName, error);
      return Promise.reject(error);
    }
    runtime.configs.set(handler, owner, config);
  }
  const context = new MethodExecutionContext(args, owner, handler, config.operation);
  return (config.adapter as MethodAdapter).finish(runtime.execute(context, config, new HandlerCall(invoke), runtime.hooks));
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
  const className = ownerNameOf(handler);
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
