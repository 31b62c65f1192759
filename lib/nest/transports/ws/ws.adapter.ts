import type { ExecutionContext } from '@nestjs/common';
// `.js` so that Node's ESM loader finds it on Nest 11 (no exports map) and 12.
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { IdempotencyConfigurationError, IdempotencyNotReplayableError, type IdempotencyError } from '../../../core/errors.js';
import { decodeValue, valueOutcome, type StoredOutcome } from '../../../core/outcome.js';
import { shown } from '../../../core/options.js';
import type { IdempotentOptions } from '../../idempotency.options.js';
import type { IdempotentMethodOptions } from '../../method-options.js';
import type { IdempotencyPrincipal } from '../../principal.js';
import type { ResolvedHandlerConfig, Settlement } from '../../transport.adapter.js';
import { rpcErrorBodyOf } from '../rpc/rpc-error.js';
import { NO_HEADERS, type BaseHandlerConfig, type HandlerSite, type MergedOptions, type Transport } from '../transport.js';
import { encodeWsError, loadWsException, replayedWsError, wsExceptionOf } from './ws-error.js';
import { gatewayOperationOf, isGatewayHandler, isSocketIoClient } from './ws-operation.js';
import { wsPrincipalOf, type GatewayClientLike } from './ws-principal.js';

/** Options of HTTP routes and RabbitMQ consumers, which a gateway message has no use for. */
const REQUEST_ONLY_OPTIONS = ['header', 'replayHeaders', 'ack', 'maxDeliveries', 'scope'] as const;
/** The module's options that read another transport's request (a module-wide `key` reads an HTTP header). */
const NOT_INHERITED = ['key', 'fingerprint', ...REQUEST_ONLY_OPTIONS] as const;
/** `WsParamtype.ACK` of @nestjs/websockets: `@Ack()` on a parameter. */
const ACK_PARAM_TYPE = '13';

type GatewayFunction = (data: unknown, client: unknown) => unknown;

/**
 * WebSocket gateway handlers (`@SubscribeMessage()` of a `@WebSocketGateway()`), on
 * `@nestjs/platform-socket.io` and `@nestjs/platform-ws`.
 *
 * - Key: the `key` option over the message's data and the client, required (a message
 *   carries no header or id of its own). `fingerprint` takes the same; the default is the data.
 * - Scope: the namespace (socket.io) or path (ws) and the message name; the caller on the
 *   socket (`client.data.user`, `client.user`, ...: see `wsPrincipalOf`).
 * - A duplicate gets the stored return value, which Nest sends as the first time: the
 *   acknowledgement, or the `{ event, data }` message. Refusals and cached errors are
 *   thrown as a `WsException` to the gateway's exception filters: the client gets an
 *   `exception` event carrying the problem body plus `message` (the microservice shape).
 */
export class WsTransportAdapter implements Transport {
  readonly name = 'ws';
  readonly reach = 'request' as const;
  readonly defaultInFlight = 'reject' as const;
  readonly notInherited: readonly string[] = NOT_INHERITED;

  /** When a module's runtime is created: a refusal found at a first message (`refuseUnconfigured`) needs `WsException` loaded. */
  attach(): void {
    void loadWsException();
  }

  /** `@SubscribeMessage()` handlers. */
  recognises(site: HandlerSite): boolean {
    return isGatewayHandler(site.method);
  }

  /** The key option is required; request and broker options, a `scope` function and `@Ack()` are refused. */
  validate(where: string, _merged: MergedOptions, own: IdempotentOptions, site: HandlerSite): void {
    const fail = (problem: string, fix: string): never => {
      throw new IdempotencyConfigurationError(`${where}: ${problem}`, fix);
    };
    const { key, fingerprint } = own as IdempotentMethodOptions;
    if (typeof key !== 'function') {
      fail(
        key === undefined
          ? 'a WebSocket gateway handler (@SubscribeMessage()) has no header or message id to read an idempotency key from, so it needs a key option.'
          : `key must be a function of the message's data and the client, got ${shown(key)}.`,
        'Derive the key from the message: @Idempotent({ key: (data: PlaceOrder, client) => data.requestId }), a value the client generates once and re-sends with every retry.',
      );
    }
    const ownRecord = own as Record<string, unknown>;
    for (const name of REQUEST_ONLY_OPTIONS) {
      if (ownRecord[name] === undefined) continue;
      if (name === 'scope') {
        fail(
          'scope does not apply to a WebSocket gateway handler: who is asking is read from the socket (client.data.user, client.user, client.handshake.user, client.request.user).',
          'Remove scope; put the authenticated caller on client.data.user or client.user in your guard or middleware, or override resolvePrincipal in an IdempotencyRuntime subclass.',
        );
      }
      fail(
        `${name} does not apply to a WebSocket gateway handler: it has no ${name === 'ack' || name === 'maxDeliveries' ? 'RabbitMQ delivery to acknowledge' : 'HTTP request or response'}.`,
        `Remove ${name} from this @Idempotent().`,
      );
    }
    if (fingerprint !== undefined && fingerprint !== false && typeof fingerprint !== 'function') {
      fail(
        "fingerprint must be false or a function of the message's data and the client.",
        'Pass fingerprint: (data) => material, or false.',
      );
    }
    const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, site.owner, site.propertyName) ?? {}) as Record<string, unknown>;
    if (Object.keys(params).some((param) => param.split(':')[0] === ACK_PARAM_TYPE)) {
      fail(
        'it takes @Ack() and calls the acknowledgement itself, so a duplicate, which does not run the handler, would never be acknowledged.',
        'Return the acknowledgement from the handler instead of calling ack(): the returned value is stored and sent to every duplicate.',
      );
    }
  }

  /** The runtime hands key and fingerprint functions the context: a gateway's take the message's data and the client. */
  configure(base: BaseHandlerConfig, own: IdempotentOptions): ResolvedHandlerConfig {
    const { key, fingerprint } = own as { key?: GatewayFunction; fingerprint?: false | GatewayFunction };
    const options: Record<string, unknown> = { ...base.options };
    const overMessage = (fn: GatewayFunction) => (context: ExecutionContext) => {
      const ws = context.switchToWs();
      return fn(ws.getData(), ws.getClient());
    };
    if (key) options.key = overMessage(key);
    if (typeof fingerprint === 'function') options.fingerprint = overMessage(fingerprint);
    return { ...base, options: options as ResolvedHandlerConfig['options'], keyHeaders: [], replayHeaders: NO_HEADERS };
  }

  /** `socket.io /orders place-order`, `ws /orders place-order`. */
  operationOf(context: ExecutionContext): string {
    return gatewayOperationOf(context);
  }

  /** A gateway message's key comes from the key option only (required at boot). */
  readKey(): undefined {
    return undefined;
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return `the message (the key option of ${config.handlerName} returned nothing)`;
  }

  principal(context: ExecutionContext): IdempotencyPrincipal | undefined {
    return wsPrincipalOf(context.switchToWs().getClient<GatewayClientLike>());
  }

  /** The message's data, as the client sent it (before pipes). */
  fingerprintMaterial(context: ExecutionContext): unknown {
    return context.switchToWs().getData<unknown>() ?? null;
  }

  /**
   * What the client receives: `ws` sends JSON, so the value is stored as JSON; socket.io
   * sends binary parts (a Buffer, a typed array) as binary, so a value holding some is
   * stored faithfully and replayed as the same values, which socket.io sends the same way.
   */
  captureValue(context: ExecutionContext, value: unknown): StoredOutcome {
    return valueOutcome(value, isSocketIoClient(context.switchToWs().getClient()) && hasBinary(value, 0) ? 'faithful' : 'json');
  }

  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    return { kind: 'error', error: encodeWsError(error) };
  }

  /** The stored value, sent by Nest as the first answer was; a cached error thrown again to the gateway's exception filters. */
  async replay(context: ExecutionContext, outcome: StoredOutcome, config?: ResolvedHandlerConfig): Promise<unknown> {
    if (outcome.kind === 'value') return decodeValue(outcome.value);
    await loadWsException();
    if (outcome.kind === 'unstorable') throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    throw replayedWsError(outcome.error, config?.policy.errorClasses);
  }

  prepareErrors(): Promise<unknown> {
    return loadWsException();
  }

  /** A `WsException` carrying the problem body plus `message` (and `retryAfterMs` when in flight): the client's `exception` event. */
  toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    return wsExceptionOf(rpcErrorBodyOf(error));
  }

  /** `toTransportError` runs right after a `'rejected'` settlement and needs `WsException` loaded. */
  settle(_context: ExecutionContext, _config: ResolvedHandlerConfig, settlement: Settlement): Promise<void> | undefined {
    return settlement === 'rejected' ? loadWsException().then(() => undefined) : undefined;
  }
}

/** Whether socket.io would send part of `value` as binary (its parser's rule: Buffers, ArrayBuffers and views, also under toJSON()). */
function hasBinary(value: unknown, depth: number): boolean {
  if (typeof value !== 'object' || value === null || depth > 32) return false;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return true;
  if (Array.isArray(value)) return value.some((item) => hasBinary(item, depth + 1));
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return hasBinary((toJSON as () => unknown).call(value), depth + 1);
  return Object.values(value).some((item) => hasBinary(item, depth + 1));
}
