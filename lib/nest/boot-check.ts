import { IdempotencyConfigurationError } from '../core/index.js';
import { RUNTIME_PROPERTY } from './internal.js';

/** The handlers `@Idempotent()` decorated on a prototype, and the marker that its boot check is installed. */
const DECORATED = Symbol.for('nestjs-idempotency:boot-checked-handlers');

type BootHook = (this: Record<PropertyKey, unknown>, ...args: unknown[]) => unknown;

/**
 * An application that never imports IdempotencyModule has no explorer to check its
 * `@Idempotent()` handlers at boot, and would answer every request to them with a 500. So
 * each class with an `@Idempotent()` method gets an `onApplicationBootstrap` hook (its own,
 * if it has one, runs after): Nest calls it during `app.init()` on every instance it built,
 * after every module's `onModuleInit`, when IdempotencyModule, if reachable, has given the
 * instance its runtime. An instance without one stops the boot with the fix.
 *
 * Where IdempotencyModule is imported but out of the class's reach, its explorer refuses
 * the boot first, in `onModuleInit`, with the module that cannot reach it. Instances Nest
 * did not build (`new`), request-scoped and transient ones get no hook call: their
 * handlers still refuse at the call, as before.
 */
export function checkAtBoot(prototype: object, propertyKey: string | symbol): void {
  const owner = prototype as Record<PropertyKey, unknown>;
  const handlers = Object.prototype.hasOwnProperty.call(owner, DECORATED) ? (owner[DECORATED] as string[]) : undefined;
  if (handlers) {
    handlers.push(String(propertyKey));
    return;
  }
  const decorated = [String(propertyKey)];
  Object.defineProperty(owner, DECORATED, { value: decorated });
  // The class's own hook, defined in its body before any method decorator ran.
  const own = Object.getOwnPropertyDescriptor(owner, 'onApplicationBootstrap')?.value as BootHook | undefined;
  const hook: BootHook = function (...args) {
    if (!this[RUNTIME_PROPERTY]) throw unconnectedAtBoot(this.constructor as Function, decorated);
    const next = own ?? (Object.getPrototypeOf(owner) as { onApplicationBootstrap?: BootHook } | null)?.onApplicationBootstrap;
    return typeof next === 'function' ? next.apply(this, args) : undefined;
  };
  Object.defineProperty(owner, 'onApplicationBootstrap', { value: hook, configurable: true, writable: true, enumerable: false });
}

function unconnectedAtBoot(owner: Function, handlers: readonly string[]): IdempotencyConfigurationError {
  const names = handlers.map((name) => `${owner.name}.${name}`).join(', ');
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${names} cannot find IdempotencyModule: the application imports none, so every call would be refused.`,
    'Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module (IdempotencyTestingModule.forRoot() in a unit test), or import IdempotencyModule into the module that declares this class.',
  );
}
