import type { ExecutionContext } from '@nestjs/common';
import { canonicalJson } from '../../../core/index.js';
import { messageConsumerOf } from './message-servers.js';
import { rmqConsumerOf } from './rmq-consumers.js';

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
 * The operation of a message, the part of every key's scope that keeps two consumers and
 * two patterns apart: the transport, the consumer that received it, what it was received
 * on, and the handler's declared pattern. `rmq queue=orders-eu refund.create` (the
 * queue), `nats queue=workers orders.created` (the queue group, when the server or handler
 * has one), `nats subject=orders.eu orders.*` and `mqtt topic=...`, `redis channel=...`
 * (what a wildcard pattern matched, when it differs from the pattern), `kafka group=...`
 * (the consumer group); `tcp refund.create` has none. Names, never addresses: two
 * instances of one service consuming one queue share their records.
 */
export function messageOperationOf(context: ExecutionContext): string {
  const message = typeof context.getArgByIndex === 'function' ? context.getArgByIndex<object | undefined>(1) : context.getArgs?.()[1];
  // RmqContext -> rmq, NatsContext -> nats, ...; gRPC hands no context object.
  const contextName = typeof message === 'object' && message !== null ? message.constructor?.name : undefined;
  const transport = contextName?.endsWith('Context') ? contextName.slice(0, -'Context'.length).toLowerCase() : context.getType();
  const pattern = declaredPatternOf(context);
  return `${transport}${consumerPartOf(message, pattern)} ${pattern}`;
}

interface TransportContextLike {
  getChannelRef?(): unknown;
  getSubject?(): unknown;
  getTopic?(): unknown;
  getChannel?(): unknown;
}

function consumerPartOf(message: object | undefined, pattern: string): string {
  if (typeof message !== 'object' || message === null) return '';
  const context = message as TransportContextLike;
  const consumer = messageConsumerOf(message);
  let part = '';
  const channel = typeof context.getChannelRef === 'function' ? context.getChannelRef() : undefined;
  const queue = consumer?.queue ?? (typeof channel === 'object' && channel !== null ? rmqConsumerOf(channel)?.queue : undefined);
  if (queue !== undefined) part += ' queue=' + queue;
  else if (consumer?.queueGroup !== undefined) part += ' queue=' + consumer.queueGroup;
  if (consumer?.group !== undefined) part += ' group=' + consumer.group;
  for (const [name, read] of [
    ['subject', context.getSubject],
    ['topic', context.getTopic],
    ['channel', context.getChannel],
  ] as const) {
    if (typeof read !== 'function') continue;
    const received = read.call(context);
    if (typeof received === 'string' && received !== pattern) part += ` ${name}=${received}`;
    break;
  }
  return part;
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
