import type { TransportAdapter } from '../transport.adapter.js';
import { BullMqAdapter } from './bullmq/bullmq.adapter.js';
import { GraphqlTransportAdapter } from './graphql/graphql.adapter.js';
import { HttpTransportAdapter } from './http/http.adapter.js';
import { MethodAdapter } from './method/method.adapter.js';
import { RpcTransportAdapter } from './rpc/rpc.adapter.js';
import { ScheduleAdapter } from './schedule/schedule.adapter.js';
import type { HandlerSite, Transport } from './transport.js';
import { WsTransportAdapter } from './ws/ws.adapter.js';

/**
 * Every transport `@Idempotent()` serves, in the order a decorated method is matched
 * against them: the first that recognises it serves it (a route before a message handler;
 * plain provider methods last, as they take every method no other transport claims).
 * Transports hold no state of one application, so one instance serves every module.
 *
 * Adding a transport: a folder under transports/ with a class implementing `Transport`,
 * and one line here.
 */
export const TRANSPORTS: readonly Transport[] = [
  new HttpTransportAdapter(),
  new RpcTransportAdapter(),
  new GraphqlTransportAdapter(),
  new BullMqAdapter(),
  new ScheduleAdapter(),
  new WsTransportAdapter(),
  new MethodAdapter(),
];

/** The transport that serves a decorated method (boot, and a method's first call without a request). */
export function transportFor(site: HandlerSite): Transport {
  // The last transport (plain methods) recognises every method.
  return TRANSPORTS.find((transport) => transport.recognises(site)) ?? TRANSPORTS[TRANSPORTS.length - 1];
}

/** The transports Nest reaches with a request, by `ExecutionContext.getType()` (a fresh record: a runtime may change its own). */
export function requestTransports(): Record<string, TransportAdapter> {
  const byType: Record<string, TransportAdapter> = {};
  for (const transport of TRANSPORTS) if (transport.reach === 'request') byType[transport.name] = transport;
  return byType;
}

/** The transport of requests of this `ExecutionContext.getType()`, if the library serves them. */
export function requestTransportOf(type: string): Transport | undefined {
  return TRANSPORTS.find((transport) => transport.reach === 'request' && transport.name === type);
}

/** The verdict of `isRequestHandler`, once per method: metadata never changes after boot, and a method call asks on every call. */
const requestHandlers = new WeakMap<Function, boolean>();

/**
 * True for the methods a request reaches (HTTP routes, microservice handlers, GraphQL
 * resolvers, WebSocket gateway handlers): their key comes from the request, so a call
 * without one is no tick or job but your own code calling a handler.
 */
export function isRequestHandler(method: Function, owner: Function, propertyName: string, handlerName: string): boolean {
  let verdict = requestHandlers.get(method);
  if (verdict === undefined) {
    const site: HandlerSite = { method, owner, propertyName, handlerName };
    verdict = TRANSPORTS.some((transport) => transport.reach === 'request' && transport.recognises(site));
    requestHandlers.set(method, verdict);
  }
  return verdict;
}
