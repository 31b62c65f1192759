import type { ExecutionContext } from '@nestjs/common';
import type { HttpResponseLike } from '../../problem.js';
import type { BodyCarrier } from './http-body-material.js';

/** The parts of an Express or Fastify request the library reads (HTTP routes, and the request behind a GraphQL operation). */
export interface HttpRequestLike extends BodyCarrier {
  params?: unknown;
  query?: unknown;
  user?: unknown;
  auth?: unknown;
  session?: unknown;
}

/**
 * The request and response, read the way `switchToHttp()` reads them (arguments 0 and 1)
 * without its per-call closures: these run several times on every request.
 */
export function requestOf(context: ExecutionContext): HttpRequestLike {
  return typeof context.getArgByIndex === 'function'
    ? context.getArgByIndex<HttpRequestLike>(0)
    : context.switchToHttp().getRequest<HttpRequestLike>();
}

export function responseOf(context: ExecutionContext): HttpResponseLike {
  return typeof context.getArgByIndex === 'function'
    ? context.getArgByIndex<HttpResponseLike>(1)
    : context.switchToHttp().getResponse<HttpResponseLike>();
}
