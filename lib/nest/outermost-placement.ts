import type { NestInterceptor } from '@nestjs/common';
import type { ApplicationConfig } from '@nestjs/core';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';

/** Nest's metadata key of `@UseInterceptors()` (`INTERCEPTORS_METADATA`), stable since Nest 4. */
const INTERCEPTORS_METADATA = '__interceptors__';

/**
 * Classes with an `@Idempotent()` method, noted by the decorator: whether any of them has
 * interceptors of its own (`@UseInterceptors()` on the class or a method) decides whether
 * the answer needs an outermost layer. Classes live as long as their module anyway.
 */
const decoratedClasses = new Set<Function>();

/** Called by `@Idempotent()` for the class that declares the method. */
export function noteIdempotentClass(type: Function): void {
  decoratedClasses.add(type);
}

/** Applications whose interceptor list this process already arranges (one per ApplicationConfig). */
const arranged = new WeakSet<ApplicationConfig>();

/**
 * Makes `IdempotencyInterceptor` the outermost interceptor of the application, so that
 * the answer it stores and replays is the one the application's own interceptors
 * produced (see `AnswerFrame`). Nest builds each handler's interceptor chain from
 * `getGlobalInterceptors()` when it registers the handler, after every
 * `APP_INTERCEPTOR` and `useGlobalInterceptors()` is in: reading the list through this
 * arrangement then puts the interceptor first. The instance the application registered
 * itself (a subclass with hooks, say) is the one moved; `own` (the module's) stands in
 * when it registered none. An application with no interceptor around any `@Idempotent()`
 * handler gets its list unchanged: the wrapper alone answers, with no pipeline to pay.
 */
export function placeOutermost(config: ApplicationConfig, own: IdempotencyInterceptor): void {
  if (arranged.has(config)) return;
  arranged.add(config);
  const read = config.getGlobalInterceptors.bind(config);
  config.getGlobalInterceptors = (): NestInterceptor[] => {
    const list = read();
    const registered = list.find((interceptor) => interceptor instanceof IdempotencyInterceptor);
    const first = registered ?? own;
    if (list[0] === first) return list;
    if (!registered && !hasInterceptorsAround(list, config)) return list;
    return [first, ...list.filter((interceptor) => interceptor !== first)];
  };
}

function hasInterceptorsAround(globals: readonly NestInterceptor[], config: ApplicationConfig): boolean {
  return globals.length > 0 || config.getGlobalRequestInterceptors().length > 0 || someClassHasInterceptors();
}

/**
 * Whether a noted class has `@UseInterceptors()` on itself or a method. Nest asks for the
 * global list once per handler at boot: each class is looked at once (its decorators have
 * all run by then), and only the classes noted since the last look are.
 */
let classesLookedAt = 0;
let interceptorsFound = false;

function someClassHasInterceptors(): boolean {
  if (interceptorsFound || classesLookedAt === decoratedClasses.size) return interceptorsFound;
  let index = 0;
  for (const type of decoratedClasses) {
    if (index++ < classesLookedAt) continue;
    if (classHasInterceptors(type)) {
      interceptorsFound = true;
      break;
    }
  }
  classesLookedAt = decoratedClasses.size;
  return interceptorsFound;
}

function classHasInterceptors(type: Function): boolean {
  if (hasInterceptors(type)) return true;
  const prototype = type.prototype as Record<string, unknown> | undefined;
  if (!prototype) return false;
  for (const name of Object.getOwnPropertyNames(prototype)) {
    const member = Object.getOwnPropertyDescriptor(prototype, name)?.value as unknown;
    if (typeof member === 'function' && hasInterceptors(member)) return true;
  }
  return false;
}

function hasInterceptors(target: object): boolean {
  const interceptors = Reflect.getMetadata(INTERCEPTORS_METADATA, target) as unknown[] | undefined;
  return Array.isArray(interceptors) && interceptors.length > 0;
}
