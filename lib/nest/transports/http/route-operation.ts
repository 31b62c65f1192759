import type { ExecutionContext } from '@nestjs/common';
// `.js` so that Node's ESM loader finds it on Nest 11 (no exports map) and 12.
import { METHOD_METADATA, PATH_METADATA, VERSION_METADATA } from '@nestjs/common/constants.js';
import { hostPartOf, type HostRoutedRequest } from './host-operation.js';

/** Nest's RequestMethod enum, by value, for the metadata fallback. */
const REQUEST_METHODS = [
  'GET',
  'POST',
  'PUT',
  'DELETE',
  'PATCH',
  'ALL',
  'OPTIONS',
  'HEAD',
  'SEARCH',
  'PROPFIND',
  'PROPPATCH',
  'MKCOL',
  'COPY',
  'MOVE',
  'LOCK',
  'UNLOCK',
];

interface RoutedRequest extends HostRoutedRequest {
  method?: string;
  baseUrl?: string;
  /** Express: the matched route, whose `path` is the template as registered (global prefix and URI version included). */
  route?: { path?: unknown };
  /** Fastify 4.10+ / 5: the matched route's template. */
  routeOptions?: { url?: unknown };
  /** Fastify before 4.10. */
  routerPath?: unknown;
}

/**
 * The operation of an HTTP request, the part of every key's scope that keeps two routes
 * apart whatever the classes and methods behind them are called: `POST /v1/refunds/:id`,
 * the method and the full route template with the global prefix and URI version, read
 * from the router that matched the request; header- or media-type-versioned handlers add `@v2`.
 */
export function routeOperationOf(context: ExecutionContext): string {
  const request =
    typeof context.getArgByIndex === 'function'
      ? context.getArgByIndex<RoutedRequest>(0)
      : context.switchToHttp().getRequest<RoutedRequest>();
  const template = routeTemplateOf(request) ?? routeTemplateFromMetadata(context);
  const version = versionOf(context.getHandler(), context.getClass());
  const method = (request?.method ?? 'ANY').toUpperCase();
  const host = hostPartOf(context.getHandler(), context.getClass(), request);
  if (version === undefined || versionInPath(template, version, context)) return `${method} ${template}${host}`;
  return `${method} ${template}@${Array.isArray(version) ? version.map(String).join('|') : String(version)}${host}`;
}

type Version = string | symbol | Array<string | symbol>;

/**
 * The handler's (or else its controller's) declared version, read once per handler and
 * class: metadata never changes after boot, and this runs on every request. Keyed by
 * class too, because an inherited handler serves several controllers.
 */
const versions = new WeakMap<Function, WeakMap<Function, Version | null>>();
function versionOf(handler: Function, controller: Function): Version | undefined {
  let byClass = versions.get(handler);
  if (!byClass) versions.set(handler, (byClass = new WeakMap()));
  let version = byClass.get(controller);
  if (version === undefined) {
    version =
      ((Reflect.getMetadata(VERSION_METADATA, handler) ?? Reflect.getMetadata(VERSION_METADATA, controller)) as Version | undefined) ??
      null;
    byClass.set(controller, version);
  }
  return version ?? undefined;
}

/**
 * URI versioning puts the version in the template as a segment of its own (`/v2/refunds`,
 * or `/2/refunds` without a prefix); header and media-type versioning do not, and then
 * the version is added to the operation so that two versions of one path never share keys.
 */
function versionInPath(template: string, version: string | symbol | Array<string | symbol>, context: ExecutionContext): boolean {
  const versions = (Array.isArray(version) ? version : [version]).filter((v): v is string => typeof v === 'string');
  if (versions.length === 0) return false;
  // Counted against the declared paths: a segment of the route's own (`/partners/v2/orders`
  // under header versioning) is not the version, only one URI versioning added is.
  const declared = declaredSegmentsOf(context);
  const segments = template.split('/');
  const count = (parts: string[], v: string) => parts.filter((segment) => segment === v || segment === `v${v}`).length;
  return versions.every((v) => count(segments, v) > count(declared, v));
}

/** The declared path's segments, once per handler and class. */
const declaredSegments = new WeakMap<Function, WeakMap<Function, string[]>>();
function declaredSegmentsOf(context: ExecutionContext): string[] {
  const handler = context.getHandler();
  let byClass = declaredSegments.get(handler);
  if (!byClass) declaredSegments.set(handler, (byClass = new WeakMap()));
  let segments = byClass.get(context.getClass());
  if (!segments) byClass.set(context.getClass(), (segments = routeTemplateFromMetadata(context).split('/')));
  return segments;
}

function routeTemplateOf(request: RoutedRequest | undefined): string | undefined {
  if (!request) return undefined;
  const fastify = request.routeOptions?.url ?? request.routerPath;
  if (typeof fastify === 'string') return fastify;
  const express = request.route?.path;
  if (typeof express === 'string') return (request.baseUrl ?? '') + express;
  if (express instanceof RegExp) return (request.baseUrl ?? '') + String(express);
  return undefined;
}

/** For platforms that expose no matched route: the controller and method paths (no global prefix known here). */
function routeTemplateFromMetadata(context: ExecutionContext): string {
  const join = (value: unknown) => (Array.isArray(value) ? value.join('|') : String(value ?? ''));
  const parts = [
    join(Reflect.getMetadata(PATH_METADATA, context.getClass())),
    join(Reflect.getMetadata(PATH_METADATA, context.getHandler())),
  ];
  return (
    '/' +
    parts
      .map((part) => part.replace(/^\/+|\/+$/g, ''))
      .filter(Boolean)
      .join('/')
  );
}

/** The HTTP method a handler is declared with (`POST`), from its metadata; undefined when it is no route. */
export function declaredHttpMethodOf(handler: Function): string | undefined {
  if (Reflect.getMetadata(PATH_METADATA, handler) === undefined) return undefined;
  const method = Reflect.getMetadata(METHOD_METADATA, handler) as number | undefined;
  return method === undefined ? undefined : (REQUEST_METHODS[method] ?? String(method));
}
