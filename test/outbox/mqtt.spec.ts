import { Body, Controller, Module, Param, Post, type INestApplication, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, EventPattern, Payload, Transport, type MicroserviceOptions, type MqttContext } from '@nestjs/microservices';
import request from 'supertest';
import { Idempotent, IdempotencyModule, IdempotencyOutbox, MemoryIdempotencyStore, type IdempotencyEvent } from '../../lib/index.js';
import type { OutboxSettlement } from '../../lib/core/outbox-store.js';
import { Effects, NEST_LOGGER, uniqueName, waitFor } from '../messages/support.js';

/**
 * Issue 44 over MQTT 5 on the real Mosquitto: the outbox's message id travels as the
 * `idempotency-key` user property, which the consumer's @Idempotent() reads by default, so a
 * refund emitted by an HTTP handler is applied once; a relay that sends it again (its
 * settlement lost, its claim run out) sends the same id, and the consumer replays it.
 */
const MQTT_URL = process.env.TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';
const TOPIC = `${uniqueName('outbox')}/refunds`;

/** A memory store whose next `failures` settlements fail, as a database lost after the broker confirmed. */
class LosingSettlementsStore extends MemoryIdempotencyStore {
  failures = 0;
  settleAttempts = 0;

  override async settleOutbox(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    this.settleAttempts++;
    if (this.failures > 0) {
      this.failures--;
      throw new Error('the settlement was lost');
    }
    return super.settleOutbox(id, owner, settlement);
  }
}

describe('the outbox over MQTT 5 (memory store, Mosquitto)', () => {
  const effects = new Effects();
  const deliveries: { refundId: string; key: unknown }[] = [];
  const consumerEvents: IdempotencyEvent[] = [];
  const apiStore = new LosingSettlementsStore();
  let api: INestApplication;
  let consumer: INestMicroservice;

  beforeAll(async () => {
    @Controller()
    class LedgerConsumer {
      @EventPattern<string>(TOPIC)
      @Idempotent()
      apply(@Payload() refund: { refundId: string }): void {
        effects.hit(refund.refundId);
      }
    }
    @Module({
      imports: [
        IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false, onEvent: (event) => consumerEvents.push(event) }),
      ],
      controllers: [LedgerConsumer],
    })
    class ConsumerModule {}
    consumer = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
      transport: Transport.MQTT,
      options: { url: MQTT_URL, protocolVersion: 5 },
      logger: NEST_LOGGER,
    });
    // Every delivery, applied or replayed, passes here first: the id it carries, as the consumer read it.
    consumer.useGlobalGuards({
      canActivate: (context) => {
        const packet = context.switchToRpc().getContext<MqttContext>().getPacket();
        deliveries.push({
          refundId: context.switchToRpc().getData<{ refundId: string }>().refundId,
          key: packet.properties?.userProperties?.['idempotency-key'],
        });
        return true;
      },
    });
    await consumer.listen();

    @Controller('refunds')
    class RefundsController {
      constructor(private readonly outbox: IdempotencyOutbox) {}

      @Post(':id')
      @Idempotent()
      refund(@Param('id') refundId: string, @Body() body: { amount: number }): { messageId: string } {
        return { messageId: this.outbox.emit('LEDGER', TOPIC, { refundId, amount: body.amount }) };
      }
    }
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          store: apiStore,
          logger: false,
          outbox: { pollInterval: 50, claimTtl: 1_000, sendTimeout: 500, retryDelay: 50, maxRetryDelay: 200 },
        }),
        ClientsModule.register([{ name: 'LEDGER', transport: Transport.MQTT, options: { url: MQTT_URL, protocolVersion: 5 } }]),
      ],
      controllers: [RefundsController],
    })
    class ApiModule {}
    api = await NestFactory.create(ApiModule, { logger: NEST_LOGGER });
    await api.init();
  });

  afterAll(async () => {
    await api?.close();
    await consumer?.close();
  });

  const refund = (key: string, id: string) =>
    request(api.getHttpServer()).post(`/refunds/${id}`).set('Idempotency-Key', key).send({ amount: 3 });
  const deliveriesOf = (refundId: string) => deliveries.filter((delivery) => delivery.refundId === refundId);

  it('carries the message id as the idempotency-key user property; applied once; a replay of the request sends nothing', async () => {
    const first = await refund('q-1', 'q-1').expect(201);
    await waitFor('q-1 applied', () => effects.count('q-1') === 1);
    expect(deliveriesOf('q-1')).toEqual([{ refundId: 'q-1', key: first.body.messageId }]);
    expect(consumerEvents.filter((event) => event.type === 'completed')).toHaveLength(1);

    const replay = await refund('q-1', 'q-1').expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    // A later message passes the same way: had the replay sent q-1 again, it would have been delivered before it.
    await refund('q-2', 'q-2').expect(201);
    await waitFor('q-2 applied', () => effects.count('q-2') === 1);
    expect(deliveriesOf('q-1')).toHaveLength(1);
  });

  it('sent again with the same id after its settlement was lost: the consumer replays it', async () => {
    apiStore.failures = 1;
    const settledBefore = apiStore.settleAttempts;
    const sent = await refund('q-3', 'q-3').expect(201);
    // Sent, its settlement lost, its claim run out (claimTtl 1 s): the next claim sends it again.
    await waitFor('q-3 delivered twice', () => deliveriesOf('q-3').length === 2);
    expect(apiStore.settleAttempts).toBeGreaterThanOrEqual(settledBefore + 2);
    expect(deliveriesOf('q-3').map((delivery) => delivery.key)).toEqual([sent.body.messageId, sent.body.messageId]);
    await waitFor('the second delivery replayed', () => consumerEvents.some((event) => event.type === 'replayed'));
    expect(effects.count('q-3')).toBe(1);
    await waitFor('the backlog empty', async () => (await apiStore.outboxBacklog()).pending === 0);
  });
});
