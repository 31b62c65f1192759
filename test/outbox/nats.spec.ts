import { Body, Controller, Module, Param, Post, type INestApplication, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, Ctx, EventPattern, Payload, Transport, type MicroserviceOptions, type NatsContext } from '@nestjs/microservices';
import request from 'supertest';
import { Idempotent, IdempotencyModule, IdempotencyOutbox, MemoryIdempotencyStore } from '../../lib/index.js';
import { Effects, NATS_URL, NEST_LOGGER, uniqueName, waitFor } from '../messages/support.js';

/**
 * Issue 44 over NATS: the outbox's message id travels as the Nats-Msg-Id header, which the
 * consumer's @Idempotent() reads by default, so a refund emitted by an HTTP handler is
 * applied once, and a replay of the request sends nothing.
 */
const SUBJECT = uniqueName('outbox.refunds').replace(/-/g, '_');

describe('the outbox over NATS (memory store)', () => {
  const effects = new Effects();
  const deliveries = new Effects();
  const msgIds: string[] = [];
  let api: INestApplication;
  let consumer: INestMicroservice;

  beforeAll(async () => {
    @Controller()
    class LedgerConsumer {
      @EventPattern<string>(SUBJECT)
      @Idempotent()
      apply(@Payload() refund: { refundId: string }, @Ctx() context: NatsContext): void {
        msgIds.push(String(context.getHeaders()?.get('Nats-Msg-Id')));
        effects.hit(refund.refundId);
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false })], controllers: [LedgerConsumer] })
    class ConsumerModule {}
    consumer = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
      transport: Transport.NATS,
      options: { servers: [NATS_URL] },
      logger: NEST_LOGGER,
    });
    consumer.useGlobalGuards({
      canActivate: (context) => {
        deliveries.hit(context.switchToRpc().getData<{ refundId: string }>().refundId);
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
        return { messageId: this.outbox.emit('LEDGER', SUBJECT, { refundId, amount: body.amount }) };
      }
    }
    @Module({
      imports: [
        IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false }),
        ClientsModule.register([{ name: 'LEDGER', transport: Transport.NATS, options: { servers: [NATS_URL] } }]),
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

  it('carries the message id as Nats-Msg-Id; the consumer applies it once; a replay sends nothing', async () => {
    const first = await refund('n-1', 'n-1').expect(201);
    await waitFor('n-1 applied', () => effects.count('n-1') === 1);
    expect(msgIds).toEqual([first.body.messageId]);
    const replay = await refund('n-1', 'n-1').expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    await refund('n-2', 'n-2').expect(201);
    await waitFor('n-2 applied', () => effects.count('n-2') === 1);
    expect(deliveries.count('n-1')).toBe(1);
  });
});
