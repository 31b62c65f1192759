import type { ExecutionContext } from '@nestjs/common';
import { canonicalJson, IdempotencyConfigurationError } from '../../../core/index.js';
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
 * has one), `nats subject=orders.eu orders.*`, `mqtt topic=...`, `redis channel=...` and
 * `rmq pattern=orders.eu orders.*` (what a wildcard or one of several declared patterns
 * matched, when it differs from the declaration), `kafka group=...` (the consumer group);
 * `handler=Class.method` when several event handlers are chained on one pattern (each runs
 * for every message, so each keeps its own records); `tcp refund.create` has none. Names,
 * never addresses: two instances of one service consuming one queue share their records.
 */
export function messageOperationOf(context: ExecutionContext): string {
  const message = typeof context.getArgByIndex === 'function' ? context.getArgByIndex<object | undefined>(1) : context.getArgs?.()[1];
  // RmqContext -> rmq, NatsContext -> nats, ...; gRPC hands no context object.
  const contextName = typeof message === 'object' && message !== null ? message.constructor?.name : undefined;
  const transport = contextName?.endsWith('Context') ? contextName.slice(0, -'Context'.length).toLowerCase() : context.getType();
  const pattern = declaredPatternOf(context);
  return `${transport}${consumerPartOf(context, message, pattern)} ${pattern}`;
}

interface TransportContextLike {
  getChannelRef?(): unknown;
  getSubject?(): unknown;
  getTopic?(): unknown;
  getChannel?(): unknown;
  getPattern?(): unknown;
}

function consumerPartOf(context: ExecutionContext, message: object | undefined, pattern: string): string {
  if (typeof message !== 'object' || message === null) return '';
  const transportContext = message as TransportContextLike;
  const consumer = messageConsumerOf(message);
  if (consumer?.indistinct.pattern !== undefined) throw indistinctConsumers(context, consumer.indistinct.pattern);
  let part = '';
  const channel = typeof transportContext.getChannelRef === 'function' ? transportContext.getChannelRef() : undefined;
  const queue = consumer?.queue ?? (typeof channel === 'object' && channel !== null ? rmqConsumerOf(channel)?.queue : undefined);
  if (queue !== undefined) part += ' queue=' + queue;
  else if (consumer?.queueGroup !== undefined) part += ' queue=' + consumer.queueGroup;
  if (consumer?.group !== undefined) part += ' group=' + consumer.group;
  for (const [name, read] of [
    ['subject', transportContext.getSubject],
    ['topic', transportContext.getTopic],
    ['channel', transportContext.getChannel],
    ['pattern', transportContext.getPattern],
  ] as const) {
    if (typeof read !== 'function') continue;
    const received = read.call(transportContext);
    if (typeof received === 'string' && received !== pattern) part += ` ${name}=${received}`;
    break;
  }
  if (consumer !== undefined && consumer.handlers.count > 1) part += ` handler=${context.getClass().name}.${context.getHandler().name}`;
  return part;
}

function indistinctConsumers(context: ExecutionContext, pattern: string): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${context.getClass().name}.${context.getHandler().name} cannot tell which consumer received this message: two servers of a custom transport strategy consume '${pattern}', and neither names its queue, so their messages would share records.`,
    "Give each strategy instance the name of what it consumes as `options.queue` (e.g. this.options = { queue: 'orders-eu' }): the library reads a server's options.queue, the same on every instance of the service.",
  );
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
