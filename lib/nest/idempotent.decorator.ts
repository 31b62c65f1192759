import { Inject, Optional, SetMetadata, createParamDecorator, type ExecutionContext } from '@nestjs/common';
// Shared by HTTP and microservice handlers; `.js` so that Node's ESM loader finds it on Nest 11 (no exports map) and 12.
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { IdempotencyConfigurationError } from '../core/index.js';
import { IDEMPOTENCY_RUNTIME, IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyRuntime } from './idempotency.runtime.js';
import { RUNTIME_PROPERTY } from './internal.js';
import type { IdempotentMethodOptions } from './method-options.js';
import { callWithoutRequest } from './method-runner.js';
import { checkAtBoot } from './boot-check.js';
import { noteIdempotentClass } from './outermost-placement.js';
import { refuseWithoutModule } from './unconfigured.js';
/** Marks a method wrapped by `@Idempotent()`, so that a second `@Idempotent()` on it is caught. */
const WRAPPED = Symbol.for('nestjs-idempotency:wrapped');

/** Hands the handler's own ExecutionContext to the wrapper, on every transport. */
const CurrentExecutionContext = createParamDecorator((_data: unknown, context: ExecutionContext) => context);

type HandlerFunction = ((...args: unknown[]) => unknown) & { [WRAPPED]?: true };

/**
 * Makes a method idempotent: the first call with a key runs it and stores the result;
 * duplicates get that result replayed. Options override the defaults of
 * `IdempotencyModule.forRoot()`.
 *
 * - HTTP routes and microservice handlers: the key comes from the request (the
 *   `Idempotency-Key` header, the message id) or the `key` option over the ExecutionContext.
 * - Any other provider method (called by your code, `@OnEvent()`): `key` over the
 *   method's own arguments is required (see `IdempotentMethodOptions`); without it the
 *   application refuses to start.
 * - `process(job)` of a BullMQ `WorkerHost`: the key defaults to the job id.
 * - `@Cron()` / `@Interval()`: the key defaults to the tick, so that one of several
 *   instances runs each tick.
 *
 * A route or message handler called directly by your own code (no request) is refused,
 * unless idempotency is switched off (`IdempotencyTestingModule`).
 *
 * The decorator wraps the method itself rather than adding an interceptor: Nest's
 * interceptor pipeline alone costs a route a sizeable share of its throughput (see
 * docs/performance.md). Guards, pipes and your interceptors' work before the handler run
 * before the wrapper, so a request refused by them never claims its key. Where your
 * application has interceptors, `IdempotencyInterceptor` stands outside them all: the
 * answer stored is the one they produced (`ClassSerializerInterceptor`'s output, without
 * the `@Exclude()` fields), and a replay is that answer, sent without running them again.
 *
 * @example
 * @Post('refunds')
 * @Idempotent({ ttl: 24 * 60 * 60 * 1000 })
 * refund(@Body() dto: RefundDto) { ... }
 *
 * @example
 * @Idempotent({ key: (refund: RefundRequest) => refund.id })
 * async refund(refund: RefundRequest) { ... }
 */
export function Idempotent(options?: IdempotentOptions): MethodDecorator;
/**
 * `@Idempotent()` on a method called without a request (a provider method, an event
 * listener, a BullMQ processor, a schedule): `key` and `fingerprint` take the method's
 * arguments, typed `Args` and checked against the decorated method's first parameters.
 */
export function Idempotent<Args extends unknown[]>(
  options: IdempotentMethodOptions<Args>,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the method may take more parameters than the key reads
): <M extends (...args: [...Args, ...any[]]) => unknown>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<M>,
) => TypedPropertyDescriptor<M> | void;
/** Either kind of options, e.g. from a variable typed as their union. */
export function Idempotent(options?: IdempotentOptions | IdempotentMethodOptions): MethodDecorator;
export function Idempotent(options: IdempotentOptions | IdempotentMethodOptions = {}): MethodDecorator {
  return <T>(target: object, propertyKey: string | symbol, descriptor: TypedPropertyDescriptor<T>) => {
    const original = descriptor.value as unknown as HandlerFunction;
    const where = `${target.constructor.name}.${String(propertyKey)}`;
    if (typeof original !== 'function') {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${where}: it decorates methods only.`,
        'Put @Idempotent() on a method: a route, a message handler, or a provider method with a key option.',
      );
    }
    if (original[WRAPPED]) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() is applied twice to ${where}.`,
        'Keep one @Idempotent() and merge its options.',
      );
    }
    // Parameter decorators have all run by now (TypeScript applies them before method
    // decorators): the context goes in the first slot after every declared parameter.
    const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, propertyKey) ?? {}) as Record<string, { index: number }>;
    const indices = Object.values(params).map((param) => param.index);
    const hasParamDecorators = indices.length > 0;
    const contextIndex = Math.max(original.length, ...indices.map((index) => index + 1));

    const wrapper: HandlerFunction = function (this: Record<string, unknown> | undefined, ...args: unknown[]): unknown {
      let context = args[contextIndex] as ExecutionContext | undefined;
      // No request: a provider method, a job, an event or a tick, or a handler called by your own code.
      if (!context || typeof context.getType !== 'function') {
        return callWithoutRequest(this, wrapper, String(propertyKey), options, args, () => original.apply(this, args));
      }
      // NestJS 11 (and 12 before its fix) caches a gateway handler's metadata by class name,
      // so of two gateway classes of one name the second gets the first's class and handler
      // in its context: its operation and options would be the other gateway's.
      const owner = (this as { constructor?: Function } | undefined)?.constructor;
      if (owner && context.getClass() !== owner && context.getClass().name === owner.name) context = ownedBy(context, owner, wrapper);
      // Without parameter decorators Nest hands microservice and gateway handlers their raw
      // arguments, which adding the context parameter replaced by empty slots.
      if (!hasParamDecorators && context.getType() !== 'http') args = context.getArgs();
      else args.length = contextIndex;
      const runtime = this?.[RUNTIME_PROPERTY] as IdempotencyRuntime | undefined;
      if (!runtime) return refuseWithoutModule(context);
      return runtime.handle(context, options as IdempotentOptions, () => original.apply(this, args));
    };
    wrapper[WRAPPED] = true;
    Object.defineProperty(wrapper, 'name', { value: original.name });
    // Metadata other decorators put on the method before this one (guards, roles, routes).
    for (const key of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapper);
    }
    descriptor.value = wrapper as unknown as T;
    // Installed here as well as returned: plain-JavaScript callers of Reflect.decorate()
    // get the new descriptor back but often never define it on the class.
    Object.defineProperty(target, propertyKey, descriptor);

    CurrentExecutionContext()(target, propertyKey, contextIndex);
    noteIdempotentClass(typeof target === 'function' ? target : target.constructor);
    injectRuntime(target);
    // A static method is refused at boot by the explorer; an instance method's class checks its runtime at app.init().
    if (typeof target !== 'function') checkAtBoot(target, propertyKey);
    SetMetadata(IDEMPOTENT_METADATA, options)(target, propertyKey, descriptor);
    return descriptor;
  };
}

/** `context` as seen from the class and handler that really run (see the wrapper). */
function ownedBy(context: ExecutionContext, owner: Function, handler: Function): ExecutionContext {
  return Object.assign(Object.create(context) as ExecutionContext, { getClass: () => owner, getHandler: () => handler });
}

/** Property injection of the module's runtime into the controller (Nest keeps one entry per property). */
function injectRuntime(target: object): void {
  Inject(IDEMPOTENCY_RUNTIME)(target, RUNTIME_PROPERTY);
  // Optional: without IdempotencyModule, app.init() refuses (boot-check.ts) and a call outside Nest says why.
  Optional()(target, RUNTIME_PROPERTY);
}
