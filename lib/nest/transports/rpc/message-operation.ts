import type { ExecutionContext } from '@nestjs/common';
import { canonicalJson } from '../../../core/index.js';

// @nestjs/microservices is an optional peer, so its metadata keys (stable since Nest 8)
// are written out rather than imported: an HTTP-only application need not install it.
const PATTERN_METADATA = 'microservices:pattern';
const TRANSPORT_METADATA = 'microservices:transport';
/** Nest's Transport enum, by value. */
const TRANSPORTS = ['TCP', 'REDIS', 'NATS', 'MQTT', 'GRPC', 'RMQ', 'KAFKA'];

/** True when the handler is a `@MessagePattern` / `@EventPattern` handler. */
export function isMessageHandler(handler: Function): boolean {
  return Reflect.getMetadata(PATTERN_METADATA, handler) !== undefined;
}

/** The transport a message handler is bound to (`@MessagePattern(p, Transport.NATS)`): `'NATS'`, or undefined when it serves every transport. */
export function declaredTransportOf(handler: Function): string | undefined {
  const transport = Reflect.getMetadata(TRANSPORT_METADATA, handler) as number | string | symbol | undefined;
  if (transport === undefined) return undefined;
  return typeof transport === 'number' ? (TRANSPORTS[transport] ?? String(transport)) : String(transport);
}

/**
 * The operation of a message, the part of every key's scope that keeps two patterns
 * apart: `rmq refund.create`, the transport and the handler's declared pattern.
 */
export function messageOperationOf(context: ExecutionContext): string {
  const message = typeof context.getArgByIndex === 'function' ? context.getArgByIndex<object | undefined>(1) : context.getArgs?.()[1];
  // RmqContext -> rmq, NatsContext -> nats, ...; gRPC hands no context object.
  const contextName = typeof message === 'object' && message !== null ? message.constructor?.name : undefined;
  const transport = contextName?.endsWith('Context') ? contextName.slice(0, -'Context'.length).toLowerCase() : context.getType();
  return `${transport} ${declaredPatternOf(context)}`;
}

/** The pattern part of a message operation, once per handler (and class, for the fallback): metadata never changes after boot. */
const declaredPatterns = new WeakMap<Function, WeakMap<Function, string>>();
function declaredPatternOf(context: ExecutionContext): string {
  const handler = context.getHandler();
  const controller = context.getClass();
  let byClass = declaredPatterns.get(handler);
  if (!byClass) declaredPatterns.set(handler, (byClass = new WeakMap()));
  let pattern = byClass.get(controller);
  if (pattern === undefined) {
    const patterns = Reflect.getMetadata(PATTERN_METADATA, handler) as unknown[] | undefined;
    pattern =
      !patterns || patterns.length === 0
        ? `${controller.name}.${handler.name}`
        : patterns.map((p) => (typeof p === 'string' ? p : canonicalJson(p))).join('|');
    byClass.set(controller, pattern);
  }
  return pattern;
}
