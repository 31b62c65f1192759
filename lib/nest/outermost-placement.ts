import { AsyncResource } from 'node:async_hooks';
import type { CallHandler, ExecutionContext, NestInterceptor } from '@nestjs/common';
import type { ApplicationConfig } from '@nestjs/core';
import { defer, mergeAll, type Observable } from 'rxjs';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
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
 * arrangement then puts the interceptor first.
 *
 * - The application registered the interceptor itself (a subclass with hooks, say): that
 *   instance is moved first.
 * - It has global interceptors of its own: the first of them is replaced by
 *   `OutermostAround`, the module's interceptor around it for `@Idempotent()` handlers
 *   only. A level added to the list would run on every route of the application, its
 *   undecorated ones included, and a level of Nest's pipeline costs each request (on
 *   NestJS 11 an `AsyncResource.bind()` per level, whose deprecated accessors cost 8-16
 *   µs on Node 20: docs/performance.md, "What we learned").
 * - Only class or route interceptors around an `@Idempotent()` handler: the module's
 *   interceptor becomes the one global interceptor. Every route pays that level (Nest's
 *   class metadata is shared by every application of the process, so the interceptor
 *   cannot be placed on those classes for this application alone).
 * - No interceptor around any `@Idempotent()` handler: the list is unchanged; the
 *   wrapper alone answers, with no pipeline to pay.
 */
export function placeOutermost(config: ApplicationConfig, own: IdempotencyInterceptor): void {
  if (arranged.has(config)) return;
  arranged.add(config);
  const read = config.getGlobalInterceptors.bind(config);
  // One wrapper per application interceptor: Nest reads the list once per handler.
  const around = new WeakMap<NestInterceptor, OutermostAround>();
  config.getGlobalInterceptors = (): NestInterceptor[] => {
    const list = read();
    const registered = list.find((interceptor) => interceptor instanceof IdempotencyInterceptor);
    if (registered) return list[0] === registered ? list : [registered, ...list.filter((interceptor) => interceptor !== registered)];
    // Nest accepts `useGlobalInterceptors(undefined)` and drops such entries later: the
    // first usable one is wrapped (only dropped entries precede it).
    const index = list.findIndex((entry) => typeof (entry as Partial<NestInterceptor> | null | undefined)?.intercept === 'function');
    if (index >= 0) {
      let first = around.get(list[index]);
      if (!first) around.set(list[index], (first = new OutermostAround(own, list[index])));
      return [...list.slice(0, index), first, ...list.slice(index + 1)];
    }
    return hasInterceptorsAround(list, config) ? [own, ...list] : list;
  };
}

/**
 * The application's first global interceptor with `IdempotencyInterceptor` around it, for
 * `@Idempotent()` handlers: the order of `[idempotency, inner, ...]` without a level of
 * its own. Other handlers run `inner` as they would without this library.
 */
class OutermostAround implements NestInterceptor {
  constructor(
    private readonly idempotency: IdempotencyInterceptor,
    private readonly inner: NestInterceptor,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>> {
    if (!Reflect.getMetadata(IDEMPOTENT_METADATA, context.getHandler())) return this.inner.intercept(context, next);
    // As Nest calls the next level: in the async context of the `handle()` call, a
    // promise of the inner interceptor's observable, flattened.
    const inner: CallHandler = {
      handle: () => {
        const scope = new AsyncResource('nestjs-idempotency:outermost');
        return defer(() => scope.runInAsyncScope(async () => this.inner.intercept(context, next))).pipe(mergeAll());
      },
    };
    return this.idempotency.intercept(context, inner);
  }
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
