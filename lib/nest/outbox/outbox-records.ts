import type { OutboxMessage } from '../../core/outbox-store.js';

/** The header (Kafka) or MQTT 5 user property a consumer's `@Idempotent()` reads its key from by default. */
const KEY_HEADER = 'idempotency-key';
/** The NATS header JetStream de-duplicates by, which `@Idempotent()` reads when there is no Idempotency-Key. */
const NATS_MESSAGE_ID = 'Nats-Msg-Id';

/** The classes of `@nestjs/microservices` a record is built with (loaded when the relay starts: the package is optional). */
interface Microservices {
  readonly RmqRecord?: new (data: unknown, options: Record<string, unknown>) => unknown;
  readonly NatsRecord?: new (data: unknown, headers: unknown) => unknown;
  readonly MqttRecord?: new (data: unknown, options: Record<string, unknown>) => unknown;
}

/** The `headers()` factory of the NATS client Nest's ClientNats uses. */
type NatsHeadersFactory = () => { set(name: string, value: string): void };

/** How the payload of one message is wrapped so that its id travels where the transport's consumer reads it. */
export type RecordWrap = (message: OutboxMessage) => unknown;

let microservices: Promise<Microservices> | undefined;
let natsHeaders: Promise<NatsHeadersFactory | undefined> | undefined;

function loadMicroservices(): Promise<Microservices> {
  return (microservices ??= import('@nestjs/microservices').then(
    (module) => module as unknown as Microservices,
    () => ({}),
  ));
}

function loadNatsHeaders(): Promise<NatsHeadersFactory | undefined> {
  natsHeaders ??= import('@nats-io/transport-node' as string).then(
    (module: { headers?: NatsHeadersFactory }) => module.headers,
    () => import('nats' as string).then((module: { headers?: NatsHeadersFactory }) => module.headers).catch(() => undefined),
  );
  return natsHeaders;
}

/** The names of a client's class and its ancestors (`ClientRMQ`, `ClientProxy`...). */
function classNamesOf(client: object): string[] {
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(client); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    names.push((proto as { constructor?: { name?: string } }).constructor?.name ?? '');
  }
  return names;
}

/**
 * How messages to `client` carry their id: the AMQP `messageId` property (RabbitMQ), the
 * `Nats-Msg-Id` header (NATS: JetStream de-duplicates by it too), the `idempotency-key`
 * header (Kafka) or MQTT 5 user property. TCP, Redis and other clients have no place for
 * it: the payload goes as it is, and the consumer derives its key from the payload
 * (`@Idempotent({ key })`).
 */
export async function recordWrapFor(client: object): Promise<RecordWrap> {
  const names = classNamesOf(client);
  if (names.includes('ClientRMQ')) {
    const { RmqRecord } = await loadMicroservices();
    if (RmqRecord) return (message) => new RmqRecord(message.data, { messageId: message.id });
  }
  if (names.includes('ClientNats')) {
    const { NatsRecord } = await loadMicroservices();
    const headers = await loadNatsHeaders();
    if (NatsRecord && headers) {
      return (message) => {
        const set = headers();
        set.set(NATS_MESSAGE_ID, message.id);
        return new NatsRecord(message.data, set);
      };
    }
  }
  if (names.includes('ClientMqtt')) {
    const { MqttRecord } = await loadMicroservices();
    if (MqttRecord) return (message) => new MqttRecord(message.data, { properties: { userProperties: { [KEY_HEADER]: message.id } } });
  }
  if (names.includes('ClientKafka')) return kafkaRecord;
  return (message) => message.data;
}

/** Kafka: the payload as the message's value (or the message, when the payload is one) with the id in its headers. */
function kafkaRecord(message: OutboxMessage): unknown {
  const data = message.data;
  if (data !== null && typeof data === 'object' && ('key' in data || 'value' in data)) {
    const kafka = data as { headers?: Record<string, unknown> };
    return { ...kafka, headers: { ...kafka.headers, [KEY_HEADER]: message.id } };
  }
  return { value: data, headers: { [KEY_HEADER]: message.id } };
}
