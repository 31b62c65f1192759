import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { EventPattern, KafkaContext, MessagePattern, MqttContext, NatsContext, RmqContext, TcpContext } from '@nestjs/microservices';
import * as natsV3 from '@nats-io/transport-node';
import * as natsV2 from 'nats';
import { type ResolvedHandlerConfig } from '../../lib/index.js';
import { NO_REPLY, RpcTransportAdapter } from '../../lib/nest/index.js';

// The key each transport carries by itself, read from Nest's real context classes (the
// brokers are exercised end to end in rmq/nats/tcp specs; Kafka and MQTT have no broker here).

class Handlers {
  @MessagePattern('request')
  request() {}

  @EventPattern<string>('event')
  event() {}
}

const adapter = new RpcTransportAdapter();
const config = (header = 'Idempotency-Key', key?: () => string) =>
  ({
    handlerName: 'Handlers.request',
    options: { header, key },
    keyHeaders: [header.toLowerCase(), 'x-idempotency-key'],
  }) as unknown as ResolvedHandlerConfig;

function rpcContext(transportContext: object, handler: keyof Handlers = 'request'): ExecutionContextHost {
  const host = new ExecutionContextHost([{ amount: 1 }, transportContext], Handlers, Handlers.prototype[handler]);
  host.setType('rpc');
  return host;
}

const rmq = (properties: Record<string, unknown>) =>
  new RmqContext([{ content: Buffer.from('{}'), fields: { deliveryTag: 1 }, properties }, {}, 'request']);

describe('message keys per transport', () => {
  it('RabbitMQ: properties.messageId, else an Idempotency-Key header', () => {
    expect(adapter.readKey(rpcContext(rmq({ messageId: 'm-1', headers: { 'Idempotency-Key': 'h-1' } })), config())).toBe('m-1');
    expect(adapter.readKey(rpcContext(rmq({ headers: { 'idempotency-key': 'h-1' } })), config())).toBe('h-1');
    expect(adapter.readKey(rpcContext(rmq({ headers: { 'X-Idempotency-Key': 'x-1' } })), config())).toBe('x-1');
    expect(adapter.readKey(rpcContext(rmq({ headers: {} })), config())).toBeUndefined();
  });

  it.each([
    ['@nats-io/transport-node (Nest 12)', () => natsV3.headers()],
    ['nats 2 (Nest 11)', () => natsV2.headers()],
  ])('NATS with %s headers: Idempotency-Key in any case, else Nats-Msg-Id', (_label, makeHeaders) => {
    const both = makeHeaders();
    both.set('Nats-Msg-Id', 'n-1');
    both.set('idempotency-key', 'k-1');
    expect(adapter.readKey(rpcContext(new NatsContext(['subject', both])), config())).toBe('k-1');
    const msgIdOnly = makeHeaders();
    msgIdOnly.set('Nats-Msg-Id', 'n-2');
    expect(adapter.readKey(rpcContext(new NatsContext(['subject', msgIdOnly])), config())).toBe('n-2');
    expect(adapter.readKey(rpcContext(new NatsContext(['subject', undefined])), config())).toBeUndefined();
  });

  it('Kafka: an idempotency-key header, as a Buffer or a string', () => {
    const kafka = (headers: Record<string, unknown>) =>
      new KafkaContext([
        { key: null, value: null, timestamp: '0', attributes: 0, offset: '0', headers } as never,
        0,
        'topic',
        {} as never,
        (async () => {}) as never,
        {} as never,
      ]);
    expect(adapter.readKey(rpcContext(kafka({ 'idempotency-key': Buffer.from('kb-1') })), config())).toBe('kb-1');
    expect(adapter.readKey(rpcContext(kafka({ 'Idempotency-Key': 'ks-1' })), config())).toBe('ks-1');
    expect(adapter.readKey(rpcContext(kafka({ 'event-id': 'e-1' })), config('Event-Id'))).toBe('e-1');
    expect(adapter.readKey(rpcContext(kafka({})), config())).toBeUndefined();
  });

  it('MQTT 5: an idempotency-key user property', () => {
    const mqtt = new MqttContext(['topic', { properties: { userProperties: { 'idempotency-key': 'q-1' } } }]);
    expect(adapter.readKey(rpcContext(mqtt), config())).toBe('q-1');
  });

  it('TCP carries none: the missing-key error points to the key option', () => {
    const tcp = rpcContext(new TcpContext([{} as never, 'request']));
    expect(adapter.readKey(tcp, config())).toBeUndefined();
    expect(adapter.describeKeySource(config(), tcp)).toMatch(/key option of @Idempotent\(\)/);
    expect(
      adapter.describeKeySource(
        config('Idempotency-Key', () => 'k'),
        tcp,
      ),
    ).toMatch(/the key option of @Idempotent\(\) returned nothing/);
  });

  it('names the expected source per transport', () => {
    expect(adapter.describeKeySource(config(), rpcContext(rmq({})))).toMatch(
      /RabbitMQ message \(its messageId property, or the Idempotency-Key header\)/,
    );
    expect(adapter.describeKeySource(config(), rpcContext(new NatsContext(['s', undefined])))).toMatch(/Nats-Msg-Id/);
  });

  it('skips a duplicate event but replays a duplicate request', async () => {
    const outcome = { kind: 'value' as const, value: { t: 'j' as const, v: { ok: true } } };
    await expect(adapter.replay(rpcContext(rmq({}), 'request'), outcome)).resolves.toEqual({ ok: true });
    await expect(adapter.replay(rpcContext(rmq({}), 'event'), outcome)).resolves.toBe(NO_REPLY);
  });
});
