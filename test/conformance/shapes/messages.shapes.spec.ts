import { Controller, Module, type ExecutionContext, type INestApplication, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Ctx,
  EventPattern,
  Payload,
  Transport,
  type MicroserviceOptions,
  type MqttContext,
  type NatsContext,
  type RmqContext,
} from '@nestjs/microservices';
import { connectAsync as mqttConnectAsync, type MqttClient } from 'mqtt';
import { connect, headers as natsHeaders, type NatsConnection } from 'nats';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../lib/index.js';
import { NATS_URL, RABBITMQ_URL, RabbitProbe, uniqueName, waitFor } from '../../messages/support.js';

/**
 * The catalogue, messages: the consumer that received a message is part of what is asked.
 * One `@EventPattern()` consuming two RabbitMQ queues (two `connectMicroservice()` calls,
 * EU and US) runs a message of each, even with one `messageId`; two NATS queue groups on
 * one subject, two subjects of one wildcard pattern, and two MQTT topics of one wildcard,
 * likewise. A redelivery to the
 * same consumer is still a duplicate.
 */

const seen: string[] = [];
const rmqMessageId = (ctx: ExecutionContext): string | undefined =>
  (ctx.switchToRpc().getContext<RmqContext>().getMessage() as { properties: { messageId?: string } }).properties.messageId;
const natsKey = (ctx: ExecutionContext): string | undefined =>
  ctx.switchToRpc().getContext<NatsContext>().getHeaders()?.get('Idempotency-Key');

@Controller()
class OrdersConsumer {
  @EventPattern<string>('order.placed')
  @Idempotent({ key: rmqMessageId })
  placed(@Payload() data: { orderId: string }, @Ctx() context: RmqContext): void {
    seen.push(`rmq ${(context.getMessage() as { fields: { routingKey: string } }).fields.routingKey} ${data.orderId}`);
  }

  @EventPattern<string>('shipments.*', Transport.NATS)
  @Idempotent({ key: natsKey })
  shipped(@Payload() data: { id: string }, @Ctx() context: NatsContext) {
    seen.push(`nats ${context.getSubject()} ${data.id}`);
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [OrdersConsumer] })
class ConsumersModule {}

const count = (line: string) => seen.filter((entry) => entry === line).length;

describe('message shapes: two queues, two queue groups, two subjects of one pattern', () => {
  let app: INestApplication;
  let probe: RabbitProbe;
  let nats: NatsConnection;
  const eu = uniqueName('orders-eu');
  const us = uniqueName('orders-us');

  beforeAll(async () => {
    app = await NestFactory.create(ConsumersModule, { logger: false });
    for (const queue of [eu, us]) {
      app.connectMicroservice<MicroserviceOptions>({
        transport: Transport.RMQ,
        options: { urls: [RABBITMQ_URL], queue, queueOptions: { durable: false } },
      });
    }
    for (const queue of ['billing', 'audit']) {
      app.connectMicroservice<MicroserviceOptions>({ transport: Transport.NATS, options: { servers: [NATS_URL], queue } });
    }
    await app.startAllMicroservices();
    await app.init();
    probe = await RabbitProbe.open();
    nats = await connect({ servers: NATS_URL });
  });
  afterAll(async () => {
    await app?.close();
    await probe?.deleteQueues(eu, us);
    await probe?.close();
    await nats?.close();
  });

  it('one @EventPattern on an EU and a US queue: the same messageId runs once per queue, and a redelivery to one queue is skipped', async () => {
    const orderId = uniqueName('order');
    const messageId = uniqueName('msg');
    probe.publish(eu, 'order.placed', { orderId }, { messageId });
    probe.publish(us, 'order.placed', { orderId }, { messageId });
    await waitFor('both queues consumed', () => count(`rmq ${eu} ${orderId}`) === 1 && count(`rmq ${us} ${orderId}`) === 1);
    probe.publish(eu, 'order.placed', { orderId }, { messageId });
    const marker = uniqueName('order');
    probe.publish(eu, 'order.placed', { orderId: marker }, { messageId: uniqueName('msg') });
    // The queue is FIFO on one consumer: once the marker ran, the duplicate before it was handled.
    await waitFor('the marker after the duplicate', () => count(`rmq ${eu} ${marker}`) === 1);
    expect([count(`rmq ${eu} ${orderId}`), count(`rmq ${us} ${orderId}`)]).toEqual([1, 1]);
  });

  it('two NATS queue groups on one subject each run a message, and two subjects of one wildcard pattern are two operations', async () => {
    const id = uniqueName('shipment');
    const key = uniqueName('key');
    const withKey = (k: string) => {
      const h = natsHeaders();
      h.set('Idempotency-Key', k);
      return h;
    };
    const event = (data: object) => new TextEncoder().encode(JSON.stringify({ pattern: 'shipments.*', data }));
    nats.publish('shipments.eu', event({ id }), { headers: withKey(key) });
    nats.publish('shipments.us', event({ id }), { headers: withKey(key) });
    // Each queue group receives each message: 2 subjects x 2 groups.
    await waitFor('both groups, both subjects', () => count(`nats shipments.eu ${id}`) === 2 && count(`nats shipments.us ${id}`) === 2);
    nats.publish('shipments.eu', event({ id }), { headers: withKey(key) });
    const marker = uniqueName('shipment');
    nats.publish('shipments.eu', event({ id: marker }), { headers: withKey(uniqueName('key')) });
    await waitFor('the marker after the duplicate', () => count(`nats shipments.eu ${marker}`) === 2);
    expect([count(`nats shipments.eu ${id}`), count(`nats shipments.us ${id}`)]).toEqual([2, 2]);
  });
});

const MQTT_URL = process.env.TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';

@Controller()
class SensorsConsumer {
  @EventPattern<string>('sensors/+/reading')
  @Idempotent()
  reading(@Payload() data: { id: string }, @Ctx() context: MqttContext): void {
    seen.push(`mqtt ${context.getTopic()} ${data.id}`);
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [SensorsConsumer] })
class SensorsModule {}

describe('message shapes: two MQTT topics of one wildcard pattern', () => {
  let app: INestMicroservice;
  let client: MqttClient;

  beforeAll(async () => {
    app = await NestFactory.createMicroservice<MicroserviceOptions>(SensorsModule, {
      transport: Transport.MQTT,
      options: { url: MQTT_URL, protocolVersion: 5 },
      logger: false,
    });
    await app.listen();
    client = await mqttConnectAsync(MQTT_URL, { protocolVersion: 5 });
  });
  afterAll(async () => {
    await client?.endAsync();
    await app?.close();
  });

  it('sensors/7 and sensors/8 under sensors/+/reading are two operations; a redelivery to one topic is skipped', async () => {
    const id = uniqueName('reading');
    const key = uniqueName('key');
    const publish = (topic: string, payloadId: string, k: string) =>
      client.publishAsync(topic, JSON.stringify({ pattern: topic, data: { id: payloadId } }), {
        qos: 1,
        properties: { userProperties: { 'Idempotency-Key': k } },
      });
    await publish('sensors/7/reading', id, key);
    await publish('sensors/8/reading', id, key);
    await waitFor('both topics', () => count(`mqtt sensors/7/reading ${id}`) === 1 && count(`mqtt sensors/8/reading ${id}`) === 1);
    await publish('sensors/7/reading', id, key);
    const marker = uniqueName('reading');
    await publish('sensors/7/reading', marker, uniqueName('key'));
    await waitFor('the marker after the duplicate', () => count(`mqtt sensors/7/reading ${marker}`) === 1);
    expect([count(`mqtt sensors/7/reading ${id}`), count(`mqtt sensors/8/reading ${id}`)]).toEqual([1, 1]);
  });
});
