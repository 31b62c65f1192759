import { Controller, Module, type ExecutionContext, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, Payload, ServerNats, type NatsContext } from '@nestjs/microservices';
import { connect, headers as natsHeaders, type NatsConnection } from 'nats';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { NATS_URL, uniqueName, waitFor } from '../../../messages/support.js';

/**
 * A shape found by attack (issue 41, item 3): two NATS queue groups on one subject are two operations
 * (the catalogue checks it with `transport: Transport.NATS`). The same application with
 * a ServerNats subclass (tracing, custom logging: the usual way to customise a Nest
 * transport, passed as `strategy`) loses the queue group from the operation, because
 * message-servers.ts only reads it when `server.constructor.name` includes 'Nats'.
 * The audit group's copy is skipped as a duplicate of the billing group's.
 */
class TracedServer extends ServerNats {}

const seen: string[] = [];
const natsKey = (ctx: ExecutionContext) => ctx.switchToRpc().getContext<NatsContext>().getHeaders()?.get('Idempotency-Key');

@Controller()
class ShipmentsConsumer {
  @EventPattern<string>('attack.shipments.created')
  @Idempotent({ key: natsKey })
  created(@Payload() data: { id: string }, @Ctx() _ctx: NatsContext) {
    seen.push(data.id);
  }
}

describe('shape: a ServerNats subclass drops the queue group from the operation', () => {
  let app: INestApplication;
  let nats: NatsConnection;
  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [ShipmentsConsumer] })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    for (const queue of ['billing', 'audit']) app.connectMicroservice({ strategy: new TracedServer({ servers: [NATS_URL], queue }) });
    await app.startAllMicroservices();
    await app.init();
    nats = await connect({ servers: NATS_URL });
  });
  afterAll(async () => {
    await app?.close();
    await nats?.close();
  });

  it('each queue group runs the message once', async () => {
    const id = uniqueName('shipment');
    const h = natsHeaders();
    h.set('Idempotency-Key', uniqueName('key'));
    nats.publish(
      'attack.shipments.created',
      new TextEncoder().encode(JSON.stringify({ pattern: 'attack.shipments.created', data: { id } })),
      {
        headers: h,
      },
    );
    await waitFor('both groups ran', () => seen.filter((s) => s === id).length === 2);
    expect(seen.filter((s) => s === id)).toHaveLength(2);
  });
});
