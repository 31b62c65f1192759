import type { ExecutionContext } from '@nestjs/common';
import { canonicalJson } from '../../../core/index.js';

// @nestjs/websockets is an optional peer: its metadata keys (the same since Nest 5) are
// written out rather than imported, so an application without gateways loads none of it.
/** `@SubscribeMessage(message)`, on the method: that it is one, and its message. */
const MESSAGE_MAPPING_METADATA = 'websockets:message_mapping';
const MESSAGE_METADATA = 'message';
/** `@WebSocketGateway(port, options)`, on the class. */
const GATEWAY_OPTIONS = 'websockets:gateway_options';

/** A WebSocket gateway handler (`@SubscribeMessage()`). */
export function isGatewayHandler(method: Function): boolean {
  return Reflect.getMetadata(MESSAGE_MAPPING_METADATA, method) === true;
}

/** A socket.io `Socket`: the namespace it connected to is its `nsp`. */
interface SocketIoClientLike {
  readonly nsp: { readonly name: string };
}

/** True for a socket.io socket (`@nestjs/platform-socket.io`); a `ws` WebSocket has no namespace. */
export function isSocketIoClient(client: unknown): client is SocketIoClientLike {
  const nsp = (client as { nsp?: { name?: unknown } } | null | undefined)?.nsp;
  return typeof nsp === 'object' && nsp !== null && typeof nsp.name === 'string';
}

/** The declared, static part of a gateway handler's operation, once per handler and class: metadata never changes after boot. */
interface DeclaredGateway {
  /** The `@SubscribeMessage()` name. */
  readonly message: string;
  /** socket.io: ` path=/x` when the gateway sets its own engine path; empty otherwise. */
  readonly ioPath: string;
  /** ws: the gateway's path, normalized as Nest's WsAdapter does (`/orders`; `/` when none). */
  readonly wsPath: string;
}

const declared = new WeakMap<Function, WeakMap<Function, DeclaredGateway>>();

function declaredOf(context: ExecutionContext): DeclaredGateway {
  const handler = context.getHandler();
  const gateway = context.getClass();
  let byClass = declared.get(handler);
  if (!byClass) declared.set(handler, (byClass = new WeakMap()));
  let found = byClass.get(gateway);
  if (!found) {
    const message = Reflect.getMetadata(MESSAGE_METADATA, handler) as unknown;
    const options = (Reflect.getMetadata(GATEWAY_OPTIONS, gateway) ?? {}) as { path?: unknown };
    const path = typeof options.path === 'string' ? options.path : undefined;
    found = {
      message: typeof message === 'string' ? message : message === undefined ? `${gateway.name}.${handler.name}` : canonicalJson(message),
      ioPath: path === undefined ? '' : ` path=${path}`,
      wsPath: '/' + (path ?? '').replace(/^\/+|\/+$/g, ''),
    };
    byClass.set(gateway, found);
  }
  return found;
}

/**
 * The operation of a gateway message, the part of every key's scope that keeps two
 * handlers apart: everything that picked the handler. socket.io: the namespace the socket
 * connected to (a dynamic namespace by the name it matched, so two tenants' namespaces
 * never meet) and the engine path when the gateway sets one, then the message
 * (`socket.io /orders place-order`); ws: the gateway's path and the message
 * (`ws /orders place-order`). Names, never addresses or ports: two instances of one
 * application share their records.
 */
export function gatewayOperationOf(context: ExecutionContext): string {
  const client = context.switchToWs().getClient<unknown>();
  const gateway = declaredOf(context);
  return isSocketIoClient(client)
    ? `socket.io ${client.nsp.name}${gateway.ioPath} ${gateway.message}`
    : `ws ${gateway.wsPath} ${gateway.message}`;
}
