/**
 * Type tests, checked by `tsc --noEmit` (`npm run typecheck`), never run: `@Idempotent()`
 * on a WebSocket gateway handler, whose `key` and `fingerprint` take the message's data and
 * the client (`IdempotentMethodOptions`' overload, checked against the handler's first
 * parameters). Each `@ts-expect-error` fails the type-check when the decorator stops
 * refusing what it marks.
 */
import { ConnectedSocket, MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import type { Socket } from 'socket.io';
import { Idempotent } from '../../lib/index.js';

interface PlaceOrder {
  requestId: string;
  sku: string;
}

@WebSocketGateway()
export class TypedGatewayKeys {
  @SubscribeMessage('place')
  @Idempotent({ key: (order: PlaceOrder) => order.requestId })
  data(@MessageBody() order: PlaceOrder) {
    return order.sku;
  }

  @SubscribeMessage('place-as')
  @Idempotent({
    key: (order: PlaceOrder, client: Socket) => `${String(client.data.tenant)}:${order.requestId}`,
    fingerprint: (order: PlaceOrder) => order.sku,
    inFlight: 'wait',
  })
  dataAndClient(@MessageBody() order: PlaceOrder, @ConnectedSocket() client: Socket) {
    return `${client.id}:${order.sku}`;
  }

  // @ts-expect-error the key reads a PlaceOrder first, the handler declares the socket first
  // (keep this line: the key's parameters are checked against the handler's)
  @Idempotent({ key: (order: PlaceOrder, client: Socket) => `${client.id}:${order.requestId}` })
  reversed(@ConnectedSocket() client: Socket, @MessageBody() order: PlaceOrder) {
    return `${client.id}:${order.sku}`;
  }
}
