/**
 * Which Nest microservice server received a message, looked up by the context object its
 * handler was called with (`RmqContext`, `NatsContext`, `KafkaContext`, ...). A message
 * carries no trace of the consumer it was delivered to: two `connectMicroservice()` calls
 * (an EU and a US queue, two NATS queue groups) run one handler for one pattern, and
 * only the server knows which queue or group it consumes. Nest registers each server's
 * handlers with `server.addHandler()`, so that method is wrapped to note, for every
 * context a handler is called with, the server and the handler's own extras.
 */

/** What of a server makes it a consumer of its own: stable across restarts and instances (names, never addresses). */
export interface MessageConsumer {
  /** RabbitMQ: the queue. */
  readonly queue?: string;
  /** NATS: the queue group (the handler's own `queue` extra, else the server's). */
  readonly queueGroup?: string;
  /** Kafka: the consumer group. */
  readonly group?: string;
}

interface ServerLike {
  readonly queue?: unknown;
  readonly groupId?: unknown;
  readonly options?: { readonly queue?: unknown };
  readonly transportId?: unknown;
}

type AddHandler = (
  this: ServerLike,
  pattern: unknown,
  callback: unknown,
  isEventHandler?: boolean,
  extras?: Record<string, unknown>,
) => unknown;
type Handler = ((this: unknown, data: unknown, context: unknown, ...rest: unknown[]) => unknown) & Record<PropertyKey, unknown>;

// Shared through the global registry: the CJS and ESM builds of this library may both be
// loaded, and only one of them may wrap Nest's prototypes.
const REGISTRY = Symbol.for('nestjs-idempotency:message-consumers');
const WRAPPED = Symbol.for('nestjs-idempotency:add-handler-wrapped');
const NOTING = Symbol.for('nestjs-idempotency:noting-handler');
const registry = globalThis as unknown as Record<symbol, WeakMap<object, MessageConsumer> | undefined>;
const consumers: WeakMap<object, MessageConsumer> = (registry[REGISTRY] ??= new WeakMap());

/** Wraps `addHandler` of Nest's `Server` and of the servers that override it (Kafka), once per process. */
export function noteMessageConsumers(microservices: Record<string, unknown>): void {
  for (const name of ['Server', 'ServerKafka']) {
    const prototype = (microservices[name] as { prototype?: Record<PropertyKey, unknown> } | undefined)?.prototype;
    if (prototype && Object.prototype.hasOwnProperty.call(prototype, 'addHandler')) wrap(prototype);
  }
}

/** The consumer that received the message whose handler context is `context`; undefined when unknown. */
export function messageConsumerOf(context: unknown): MessageConsumer | undefined {
  return typeof context === 'object' && context !== null ? consumers.get(context) : undefined;
}

function wrap(prototype: Record<PropertyKey, unknown>): void {
  if (Object.prototype.hasOwnProperty.call(prototype, WRAPPED) || typeof prototype.addHandler !== 'function') return;
  const addHandler = prototype.addHandler as AddHandler;
  prototype.addHandler = function (
    this: ServerLike,
    pattern: unknown,
    callback: unknown,
    isEventHandler?: boolean,
    extras?: Record<string, unknown>,
  ) {
    return addHandler.call(this, pattern, noting(this, callback, extras), isEventHandler, extras);
  };
  Object.defineProperty(prototype, WRAPPED, { value: true });
}

/** The handler, noting its server's consumer for each context it is called with (once: Kafka's override calls the base's). */
function noting(server: ServerLike, callback: unknown, extras: Record<string, unknown> | undefined): unknown {
  if (typeof callback !== 'function' || (callback as Handler)[NOTING]) return callback;
  const handler = callback as Handler;
  const consumer = consumerOf(server, extras);
  const noted = function (this: unknown, data: unknown, context: unknown, ...rest: unknown[]): unknown {
    if (typeof context === 'object' && context !== null) consumers.set(context, consumer);
    return handler.call(this, data, context, ...rest);
  } as Handler;
  Object.defineProperty(noted, NOTING, { value: true });
  Object.defineProperty(noted, 'name', { value: handler.name });
  return noted;
}

function consumerOf(server: ServerLike, extras: Record<string, unknown> | undefined): MessageConsumer {
  const queueGroup = textOf(extras?.queue) ?? textOf(server.options?.queue);
  return {
    queue: textOf(server.queue),
    queueGroup: server.constructor?.name.includes('Nats') ? queueGroup : undefined,
    group: textOf(server.groupId),
  };
}

function textOf(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}
