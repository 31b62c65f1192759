import { noteMessageConsumers } from './message-servers.js';

/**
 * What a Nest RabbitMQ server was configured with, looked up by the channel a delivery
 * arrived on. A delivery carries no trace of its consumer's settings: auto-ack mode is
 * only in the `basic.consume` the client sent, and a queue's dead-letter exchange only
 * in its declaration, which AMQP cannot read back. Both live on Nest's `ServerRMQ`, which
 * a handler cannot reach, so its `handleMessage` is wrapped to note them per channel.
 */
export interface RmqConsumerSettings {
  /** Auto-ack (`noAck: true`, Nest's default): the broker forgot each message as it sent it. */
  readonly noAck: boolean;
  readonly queue?: string;
  /** The dead-letter exchange declared in `queueOptions` (`''` is the default exchange). */
  readonly deadLetterExchange?: string;
  readonly deadLetterRoutingKey?: string;
  /**
   * Whether an exchange exists, asked on a channel of its own: publishing to a missing
   * one would make the broker close the consumer's channel, which Nest does not reopen.
   * `undefined` when no channel can be opened.
   */
  exchangeExists(exchange: string): Promise<boolean | undefined>;
}

/** amqplib's channel model, as `amqp-connection-manager` exposes it (`connection`). */
interface AmqpConnectionLike {
  createChannel(): Promise<{
    checkExchange(exchange: string): Promise<unknown>;
    close(): Promise<void>;
    on(event: 'error', listener: (error: unknown) => void): unknown;
  }>;
}

interface ServerRmqLike {
  /** Nest's `amqp-connection-manager` client. */
  readonly server?: { readonly connection?: AmqpConnectionLike } | null;
  readonly noAck?: unknown;
  readonly queue?: unknown;
  readonly queueOptions?: {
    readonly deadLetterExchange?: unknown;
    readonly deadLetterRoutingKey?: unknown;
    readonly arguments?: Record<string, unknown>;
  };
}

type HandleMessage = (this: ServerRmqLike, message: unknown, channel: unknown, ...rest: unknown[]) => unknown;

// Shared through the global registry: the CJS and ESM builds of this library may both be
// loaded, and only one of them may wrap Nest's prototype.
const REGISTRY = Symbol.for('nestjs-idempotency:rmq-consumers');
const WRAPPED = Symbol.for('nestjs-idempotency:rmq-consumers-wrapped');
const registry = globalThis as unknown as Record<symbol, WeakMap<object, RmqConsumerSettings> | undefined>;
const consumers: WeakMap<object, RmqConsumerSettings> = (registry[REGISTRY] ??= new WeakMap());

let watching: Promise<void> | undefined;
let watched = false;

/**
 * Starts noting the settings of every Nest RabbitMQ server. Called when the adapter is
 * created, at the application's boot, so the wrapper is in place before `listen()` has
 * connected and the first message arrives; `@nestjs/microservices` stays optional.
 */
export function watchRmqConsumers(): Promise<void> {
  watching ??= import('@nestjs/microservices').then(
    (microservices) => {
      wrap((microservices as unknown as { ServerRMQ?: { prototype?: Record<string | symbol, unknown> } }).ServerRMQ?.prototype);
      noteMessageConsumers(microservices as unknown as Record<string, unknown>);
      watched = true;
    },
    () => {
      watched = true;
    },
  );
  return watching;
}

/** True once `watchRmqConsumers()` has settled: from then on, lookups need no await. */
export function isWatchingRmqConsumers(): boolean {
  return watched;
}

/** The settings of the server that consumes on `channel`; `undefined` when unknown (another consumer, an older Nest). */
export function rmqConsumerOf(channel: object): RmqConsumerSettings | undefined {
  return consumers.get(channel);
}

function wrap(prototype: Record<string | symbol, unknown> | undefined): void {
  if (!prototype || prototype[WRAPPED] || typeof prototype.handleMessage !== 'function') return;
  const handleMessage = prototype.handleMessage as HandleMessage;
  prototype.handleMessage = function (this: ServerRmqLike, message: unknown, channel: unknown, ...rest: unknown[]): unknown {
    // One entry per channel: a reconnect brings a new channel, and the lookup stays a WeakMap hit.
    if (typeof channel === 'object' && channel !== null && !consumers.has(channel)) consumers.set(channel, settingsOf(this));
    return handleMessage.call(this, message, channel, ...rest);
  };
  Object.defineProperty(prototype, WRAPPED, { value: true });
}

function settingsOf(server: ServerRmqLike): RmqConsumerSettings {
  const queueOptions = server.queueOptions ?? {};
  const args = queueOptions.arguments ?? {};
  const known = new Map<string, Promise<boolean | undefined>>();
  // amqplib lets the named options override `arguments`, as here.
  return {
    noAck: server.noAck === true,
    queue: textOf(server.queue),
    deadLetterExchange: textOf(queueOptions.deadLetterExchange ?? args['x-dead-letter-exchange']),
    deadLetterRoutingKey: textOf(queueOptions.deadLetterRoutingKey ?? args['x-dead-letter-routing-key']),
    exchangeExists(exchange: string): Promise<boolean | undefined> {
      // The default exchange always exists; others are asked once per channel (a reconnect asks again).
      if (exchange === '') return Promise.resolve(true);
      let answer = known.get(exchange);
      if (!answer) known.set(exchange, (answer = checkExchange(server, exchange)));
      return answer;
    },
  };
}

async function checkExchange(server: ServerRmqLike, exchange: string): Promise<boolean | undefined> {
  const connection = server.server?.connection;
  if (typeof connection?.createChannel !== 'function') return undefined;
  let channel;
  try {
    channel = await connection.createChannel();
  } catch {
    return undefined;
  }
  // A missing exchange closes this channel with an error event: expected here, not a crash.
  channel.on('error', () => undefined);
  try {
    await channel.checkExchange(exchange);
  } catch {
    return false;
  }
  await channel.close().catch(() => undefined);
  return true;
}

function textOf(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}
