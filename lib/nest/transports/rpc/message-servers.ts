/**
 * Which Nest microservice server received a message, looked up by the context object its
 * handler was called with (`RmqContext`, `NatsContext`, `KafkaContext`, ...). A message
 * carries no trace of the consumer it was delivered to: two `connectMicroservice()` calls
 * (an EU and a US queue, two NATS queue groups) run one handler for one pattern, and
 * only the server knows which queue or group it consumes. Nest registers each server's
 * handlers with `server.addHandler()`, so that method is wrapped to note, for every
 * context a handler is called with, the consumer behind it.
 */

/** What of a server makes it a consumer of its own: stable across restarts and instances (names, never addresses). */
export interface MessageConsumer {
  /** RabbitMQ: the queue. */
  readonly queue?: string;
  /** NATS (and any server with an `options.queue`): the queue group, the handler's own `queue` extra first. */
  readonly queueGroup?: string;
  /** Kafka: the consumer group. */
  readonly group?: string;
  /** The handlers registered for this pattern on this server: more than one are chained event handlers, each its own operation. */
  readonly handlers: { count: number };
  /**
   * Set when two servers of a custom transport strategy registered the same pattern and
   * the library cannot tell their consumers apart (no `queue`, group or `options.queue` on
   * either): their messages would share records, so a request is refused instead. Nest's
   * own transports are told apart by their queue, group or queue group names, and two of
   * them with the same names are one consumer (instances of one service).
   */
  readonly indistinct: { pattern?: string };
}

interface ServerLike {
  readonly queue?: unknown;
  readonly groupId?: unknown;
  readonly options?: { readonly queue?: unknown };
  /** Nest's transports: a `Transport` number; a custom strategy: a symbol, or nothing. */
  readonly transportId?: unknown;
  readonly messageHandlers?: { has(pattern: unknown): boolean };
  normalizePattern?(pattern: unknown): unknown;
}

type AddHandler = (
  this: ServerLike,
  pattern: unknown,
  callback: unknown,
  isEventHandler?: boolean,
  extras?: Record<string, unknown>,
) => unknown;
type Handler = (this: unknown, ...args: unknown[]) => unknown;

// Shared through the global registry: the CJS and ESM builds of this library may both be
// loaded, and only one of them may wrap Nest's prototypes.
interface Registry {
  readonly contexts: WeakMap<object, MessageConsumer>;
  readonly noting: WeakSet<object>;
  /** Per server: its consumer of each pattern (the handlers of one pattern share it). */
  readonly servers: WeakMap<object, Map<string, MessageConsumer>>;
  /** Per pattern: the consumers of every server that registered it, to find two the library cannot tell apart. */
  readonly patterns: Map<string, Set<MessageConsumer>>;
  /** The consumers of custom transport strategies. */
  readonly custom: WeakSet<MessageConsumer>;
}
const REGISTRY = Symbol.for('nestjs-idempotency:message-consumers@2');
const WRAPPED = Symbol.for('nestjs-idempotency:add-handler-wrapped');
const holder = globalThis as unknown as Record<symbol, Registry | undefined>;
const registry: Registry = (holder[REGISTRY] ??= {
  contexts: new WeakMap(),
  noting: new WeakSet(),
  servers: new WeakMap(),
  patterns: new Map(),
  custom: new WeakSet(),
});

/** Wraps `addHandler` of Nest's `Server` and of the servers that override it (Kafka), once per process. */
export function noteMessageConsumers(microservices: Record<string, unknown>): void {
  for (const name of ['Server', 'ServerKafka']) {
    const prototype = (microservices[name] as { prototype?: Record<PropertyKey, unknown> } | undefined)?.prototype;
    if (prototype && Object.prototype.hasOwnProperty.call(prototype, 'addHandler')) wrap(prototype);
  }
}

/** The consumer that received the message whose handler context is `context`; undefined when unknown. */
export function messageConsumerOf(context: unknown): MessageConsumer | undefined {
  return typeof context === 'object' && context !== null ? registry.contexts.get(context) : undefined;
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
    if (typeof callback !== 'function' || registry.noting.has(callback))
      return addHandler.call(this, pattern, callback, isEventHandler, extras);
    return addHandler.call(
      this,
      pattern,
      noting(this, pattern, callback as Handler, extras, isEventHandler === true),
      isEventHandler,
      extras,
    );
  };
  Object.defineProperty(prototype, WRAPPED, { value: true });
}

/**
 * The handler, noting its consumer for each context it is called with. A Proxy, not a
 * wrapper function: Nest chains a pattern's event handlers through properties it sets
 * and reads on the registered callback (`next`, `extras`, `isEventHandler`), and the
 * callback reads them on itself; the Proxy passes every property through to it.
 */
function noting(
  server: ServerLike,
  pattern: unknown,
  handler: Handler,
  extras: Record<string, unknown> | undefined,
  chained: boolean,
): Handler {
  const consumer = consumerFor(server, pattern, extras, chained);
  const noted = new Proxy(handler, {
    apply(target, thisArg, args: unknown[]) {
      // (data, context), or (RequestContextHost, data, context) for request-scoped handlers and chained calls.
      for (let i = 1; i < args.length && i <= 2; i++) {
        const context = args[i];
        if (typeof context === 'object' && context !== null && typeof (context as { getArgs?: unknown }).getArgs === 'function') {
          registry.contexts.set(context, consumer);
          break;
        }
      }
      return Reflect.apply(target, thisArg, args);
    },
  });
  registry.noting.add(noted);
  return noted;
}

/** The consumer of `pattern` on `server`: one object for all the handlers the server chains on it. */
/** `chained`: an event handler, which Nest chains after the pattern's others (a request handler replaces them). */
function consumerFor(server: ServerLike, pattern: unknown, extras: Record<string, unknown> | undefined, chained: boolean): MessageConsumer {
  const key = patternKey(server, pattern);
  let byPattern = registry.servers.get(server);
  if (!byPattern) registry.servers.set(server, (byPattern = new Map()));
  const known = byPattern.get(key);
  if (known) {
    if (chained) known.handlers.count++;
    return known;
  }
  const consumer: MessageConsumer = {
    queue: textOf(server.queue),
    queueGroup: textOf(extras?.queue) ?? (server.queue === undefined ? textOf(server.options?.queue) : undefined),
    group: textOf(server.groupId),
    handlers: { count: 1 },
    indistinct: {},
  };
  byPattern.set(key, consumer);
  let consumers = registry.patterns.get(key);
  if (!consumers) registry.patterns.set(key, (consumers = new Set()));
  const custom = typeof server.transportId !== 'number';
  if (custom && identityOf(consumer) === '') {
    for (const other of consumers) {
      if (registry.custom.has(other) && identityOf(other) === '') {
        consumer.indistinct.pattern = key;
        other.indistinct.pattern = key;
      }
    }
    registry.custom.add(consumer);
  }
  consumers.add(consumer);
  return consumer;
}

function patternKey(server: ServerLike, pattern: unknown): string {
  const normalized = typeof server.normalizePattern === 'function' ? server.normalizePattern(pattern) : pattern;
  return typeof normalized === 'string' ? normalized : String(normalized);
}

/** What tells two consumers of one pattern apart. */
function identityOf(consumer: MessageConsumer): string {
  return [consumer.queue, consumer.queueGroup, consumer.group].filter(Boolean).join('\u0000');
}

function textOf(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}
