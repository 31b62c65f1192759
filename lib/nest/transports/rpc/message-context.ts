import type { ExecutionContext } from '@nestjs/common';

// @nestjs/microservices is an optional peer: the transport contexts (RmqContext,
// NatsContext, KafkaContext, ...) are told apart by their methods, never imported.

/** The parts of an amqplib message this library reads. */
export interface RmqMessageLike {
  readonly properties?: { readonly messageId?: unknown; readonly headers?: Record<string, unknown>; readonly [name: string]: unknown };
  readonly fields?: { readonly deliveryTag?: number; readonly redelivered?: boolean; readonly routingKey?: string };
  readonly content?: Uint8Array;
}

/** The parts of an amqplib channel used to settle a message. */
export interface RmqChannelLike {
  ack(message: RmqMessageLike, allUpTo?: boolean): void;
  nack(message: RmqMessageLike, allUpTo?: boolean, requeue?: boolean): void;
  reject?(message: RmqMessageLike, requeue?: boolean): void;
}

interface RmqContextLike {
  getMessage(): RmqMessageLike;
  getChannelRef(): RmqChannelLike;
}

/** `MsgHdrs` of both `nats` 2 (Nest 11) and `@nats-io/transport-node` 3 (Nest 12). */
interface NatsHeadersLike {
  keys(): string[];
  get(key: string): string;
}

interface NatsContextLike {
  getSubject(): string;
  getHeaders(): NatsHeadersLike | undefined;
}

interface KafkaContextLike {
  getMessage(): { readonly headers?: Record<string, unknown> } | undefined;
  getTopic(): string;
  getPartition(): number;
}

interface MqttContextLike {
  getTopic(): string;
  getPacket(): { readonly properties?: { readonly userProperties?: Record<string, unknown> } } | undefined;
}

/** Transports whose messages can carry a key; TCP, Redis and gRPC need the `key` option. */
export type MessageTransport = 'rmq' | 'nats' | 'kafka' | 'mqtt' | 'other';

const NATS_MESSAGE_ID_HEADER = 'nats-msg-id';
/** Nest's `PATTERN_HANDLER_METADATA` and `PatternHandler.EVENT`, the same in Nest 11 and 12. */
const PATTERN_HANDLER_METADATA = 'microservices:handler_type';
const EVENT_PATTERN_HANDLER = 2;

function hasMethods(value: unknown, ...names: string[]): boolean {
  return (
    typeof value === 'object' && value !== null && names.every((name) => typeof (value as Record<string, unknown>)[name] === 'function')
  );
}

/** The transport context of a microservice handler (`RmqContext`, `NatsContext`, ...). */
export function transportContextOf(context: ExecutionContext): unknown {
  return context.switchToRpc().getContext();
}

export function transportOf(transportContext: unknown): MessageTransport {
  if (hasMethods(transportContext, 'getMessage', 'getChannelRef')) return 'rmq';
  if (hasMethods(transportContext, 'getSubject', 'getHeaders')) return 'nats';
  if (hasMethods(transportContext, 'getMessage', 'getTopic', 'getPartition')) return 'kafka';
  if (hasMethods(transportContext, 'getPacket', 'getTopic')) return 'mqtt';
  return 'other';
}

/** The amqplib message and channel of a RabbitMQ handler, or `undefined` on other transports. */
export function rmqDeliveryOf(context: ExecutionContext): { message: RmqMessageLike; channel: RmqChannelLike } | undefined {
  const transportContext = transportContextOf(context);
  if (transportOf(transportContext) !== 'rmq') return undefined;
  const rmq = transportContext as RmqContextLike;
  const message = rmq.getMessage();
  const channel = rmq.getChannelRef();
  return message && channel && typeof channel.ack === 'function' ? { message, channel } : undefined;
}

/** True for `@EventPattern` handlers (no reply is expected). */
export function isEventHandler(context: ExecutionContext): boolean {
  const reflect = Reflect as unknown as { getMetadata?: (key: string, target: object) => unknown };
  return reflect.getMetadata?.(PATTERN_HANDLER_METADATA, context.getHandler()) === EVENT_PATTERN_HANDLER;
}

/**
 * The key the message carries by itself: RabbitMQ `properties.messageId` (else a key
 * header), a NATS `Idempotency-Key` (else `Nats-Msg-Id`) header, a Kafka or MQTT 5
 * `idempotency-key` header / user property. Nothing on TCP, Redis and gRPC.
 * `keyHeaders` are lower-case names, most preferred first.
 */
export function messageKeyOf(context: ExecutionContext, keyHeaders: readonly string[]): unknown {
  const transportContext = transportContextOf(context);
  switch (transportOf(transportContext)) {
    case 'rmq': {
      const properties = (transportContext as RmqContextLike).getMessage()?.properties;
      const messageId = properties?.messageId;
      if (messageId !== undefined && messageId !== null && messageId !== '') return messageId;
      return headerOf(properties?.headers, keyHeaders);
    }
    case 'nats': {
      const headers = (transportContext as NatsContextLike).getHeaders();
      return headers ? natsHeaderOf(headers, [...keyHeaders, NATS_MESSAGE_ID_HEADER]) : undefined;
    }
    case 'kafka':
      return headerOf((transportContext as KafkaContextLike).getMessage()?.headers, keyHeaders);
    case 'mqtt':
      return headerOf((transportContext as MqttContextLike).getPacket()?.properties?.userProperties, keyHeaders);
    default:
      return undefined;
  }
}

/** Where the key of this message was expected, for the "missing key" error. */
export function describeMessageKeySource(context: ExecutionContext | undefined, header: string, hasKeyOption: boolean): string {
  if (hasKeyOption) return 'the message (the key option of @Idempotent() returned nothing)';
  const transport = context ? transportOf(transportContextOf(context)) : 'other';
  switch (transport) {
    case 'rmq':
      return `the RabbitMQ message (its messageId property, or the ${header} header)`;
    case 'nats':
      return `the NATS message (the ${header} or Nats-Msg-Id header)`;
    case 'kafka':
      return `the Kafka message (the ${header} header)`;
    case 'mqtt':
      return `the MQTT 5 message (the ${header} user property)`;
    default:
      return 'the message (this transport carries no message id: derive one with the key option of @Idempotent(), e.g. key: (ctx) => ctx.switchToRpc().getData().id)';
  }
}

/** Headers of amqplib, kafkajs and MQTT 5 are plain objects; names are matched case-insensitively. */
function headerOf(headers: Record<string, unknown> | undefined, names: readonly string[]): unknown {
  if (!headers || typeof headers !== 'object') return undefined;
  for (const name of names) {
    for (const candidate of Object.keys(headers)) {
      if (candidate.toLowerCase() !== name) continue;
      const value = textOf(headers[candidate]);
      if (value !== undefined) return value;
    }
  }
  return undefined;
}

/** `get(name, Match.IgnoreCase)` differs between nats 2 and 3 (a number vs a string), so keys are matched here. */
function natsHeaderOf(headers: NatsHeadersLike, names: readonly string[]): string | undefined {
  if (typeof headers.keys !== 'function') return undefined;
  const keys = headers.keys();
  for (const name of names) {
    const key = keys.find((candidate) => candidate.toLowerCase() === name);
    const value = key === undefined ? undefined : headers.get(key);
    if (value) return value;
  }
  return undefined;
}

/** Header values arrive as strings, Buffers (Kafka) or arrays of them. */
function textOf(value: unknown): unknown {
  if (Array.isArray(value)) return value.length ? textOf(value[0]) : undefined;
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  return value === null || value === '' ? undefined : value;
}
