import { Module } from '@nestjs/common';
import { ConnectedSocket, MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { of } from 'rxjs';
import { Idempotent, IdempotencyModule, IdempotencyOutbox } from '../../lib/index.js';
import { until } from '../integrations/support.js';
import { closeClients, connect, startGatewayApp, type GatewayApp } from './support.js';

/**
 * The outbox inside a gateway handler (docs/outbox.md): the message a handler emits
 * through `IdempotencyOutbox` leaves once its record completed, and a duplicate message,
 * answered from the record, sends nothing. The client it goes through stands for a
 * `ClientProxy` (its `emit()`), so that no broker is needed.
 */
interface Order {
  readonly requestId: string;
  readonly sku: string;
}

const sent: Array<{ pattern: unknown; data: unknown }> = [];

describe.each(['socket.io', 'ws'] as const)('the outbox in a gateway handler on %s', (platform) => {
  let gateway: GatewayApp;

  beforeAll(async () => {
    @WebSocketGateway(platform === 'socket.io' ? { namespace: '/orders' } : { path: '/orders' })
    class OrdersGateway {
      constructor(private readonly outbox: IdempotencyOutbox) {}

      @SubscribeMessage('place')
      @Idempotent({ key: (order: Order) => order.requestId })
      place(@MessageBody() order: Order, @ConnectedSocket() _client: object) {
        const messageId = this.outbox.emit('EVENTS', 'order.placed', { requestId: order.requestId, sku: order.sku });
        return { requestId: order.requestId, messageId };
      }
    }
    @Module({
      imports: [IdempotencyModule.forRoot({ logger: false, outbox: { pollInterval: 50 } })],
      providers: [
        OrdersGateway,
        { provide: 'EVENTS', useValue: { emit: (pattern: unknown, data: unknown) => (sent.push({ pattern, data }), of(undefined)) } },
      ],
    })
    class AppModule {}
    gateway = await startGatewayApp(platform, AppModule);
  });
  afterAll(async () => {
    closeClients();
    await gateway?.close();
  });

  it('sends the message once the record completed; the duplicate, answered from the record, sends none', async () => {
    const requestId = `outbox-${platform}-${process.pid}`;
    const later = `${requestId}-later`;
    const sentFor = (id: string) => sent.filter((message) => (message.data as { requestId?: string }).requestId === id);
    const client = await connect(platform, gateway.base, '/orders');

    const first = await client.send('place', { requestId, sku: 'desk' });
    expect(first).toEqual({ kind: 'ack', value: { requestId, messageId: expect.any(String) } });
    await until('the message to leave', () => sentFor(requestId).length === 1, 5_000);
    expect(sentFor(requestId)).toEqual([{ pattern: 'order.placed', data: { requestId, sku: 'desk' } }]);

    expect(await client.send('place', { requestId, sku: 'desk' })).toEqual(first);
    // A later order's message has left: whatever the duplicate had staged would have left before it.
    await client.send('place', { requestId: later, sku: 'desk' });
    await until('the later message to leave', () => sentFor(later).length === 1, 5_000);
    expect(sentFor(requestId)).toHaveLength(1);
  });
});
