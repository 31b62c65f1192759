import { Module, type LoggerService, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import {
  ConnectedSocket,
  MessageBody,
  SubscribeMessage,
  WebSocketGateway,
  type OnGatewayDisconnect,
  type OnGatewayInit,
} from '@nestjs/websockets';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule, type IdempotencyStore } from '../../lib/index.js';
import type { Gate } from '../integrations/support.js';
import { Effects } from '../support/effects.js';
import type { GatewayPlatform } from './support.js';

/**
 * The gateway of the e2e suites: `place` (in flight refused) and `place-wait`
 * (`inFlight: 'wait'`), keyed by the order's `requestId`, on the `/orders` namespace
 * (socket.io) or path (ws), with `IdempotencyInterceptor` registered globally. A test
 * holds a run in its handler with a `Gate` in `gates`, and reads how often it ran in
 * `effects` and how many connections the gateway saw close in `disconnects.count`.
 */
export const effects = new Effects();
export const gates = new Map<string, Gate>();
/** Connections the gateway saw close. */
export const disconnects = { count: 0 };

export interface Order {
  readonly requestId?: string;
  readonly sku: string;
}

const key = { key: (order: Order) => order.requestId };

async function placeOrder(order: Order, client: { data?: { user?: { id: string } }; handshake?: { user?: { id: string } } }) {
  const run = effects.hit(order.requestId ?? 'none');
  await gates.get(order.requestId ?? '')?.passed;
  return { orderId: `o_${order.requestId}`, sku: order.sku, run, by: client.data?.user?.id ?? client.handshake?.user?.id ?? null };
}

export function gatewayModule(
  platform: GatewayPlatform,
  options: { store?: IdempotencyStore; logger?: LoggerService | false } = {},
): Type<unknown> {
  @WebSocketGateway(platform === 'socket.io' ? { namespace: '/orders' } : { path: '/orders' })
  class OrdersGateway implements OnGatewayInit, OnGatewayDisconnect {
    handleDisconnect() {
      disconnects.count++;
    }

    // Where socket.io applications authenticate: middleware on the namespace, from the handshake.
    afterInit(server: { use?: (fn: (socket: any, next: () => void) => void) => void }) {
      server.use?.((socket, next) => {
        const { user, passport } = (socket.handshake.auth ?? {}) as { user?: string; passport?: string };
        if (user) socket.data.user = { id: user };
        // What a Passport guard whose getRequest() returns the handshake leaves.
        if (passport) socket.handshake.user = { id: passport };
        next();
      });
    }

    @SubscribeMessage('place')
    @Idempotent(key)
    place(@MessageBody() order: Order, @ConnectedSocket() client: object) {
      return placeOrder(order, client);
    }

    @SubscribeMessage('place-wait')
    @Idempotent({ ...key, inFlight: 'wait' })
    placeWaiting(@MessageBody() order: Order, @ConnectedSocket() client: object) {
      return placeOrder(order, client);
    }
  }
  @Module({
    imports: [IdempotencyModule.forRoot({ logger: false, ...options })],
    providers: [OrdersGateway, { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }],
  })
  class AppModule {}
  return AppModule;
}
