import { Logger, type ExecutionContext } from '@nestjs/common';
import {
  IdempotencyNotReplayableError,
  decodeError,
  decodeValue,
  encodeError,
  encodeValue,
  unstorableReason,
  type IdempotencyError,
  type StoredOutcome,
} from '../core/index.js';
import { NO_REPLY, type ResolvedHandlerConfig, type Settlement, type TransportAdapter } from './transport.adapter.js';
import { describeMessageKeySource, isEventHandler, messageKeyOf, rmqDeliveryOf } from './rpc/message-context.js';
import { ackDecisionOf, settleDelivery } from './rpc/rmq-acknowledgement.js';
import {
  encodeRpcException,
  isEncodedRpcException,
  isRpcExceptionLike,
  loadRpcException,
  rpcErrorBodyOf,
  rpcExceptionOf,
} from './rpc/rpc-error.js';

export { isIdempotencyRpcError, type IdempotencyRpcError } from './rpc/rpc-error.js';

const logger = new Logger('IdempotencyInterceptor');

/**
 * Microservice handlers (`@MessagePattern` / `@EventPattern`) on every Nest transport.
 *
 * - Key: the `key` option, else the transport's own message id (RabbitMQ
 *   `properties.messageId`, NATS `Idempotency-Key` / `Nats-Msg-Id` header, Kafka
 *   `idempotency-key` header, MQTT 5 user property); TCP, Redis and gRPC need the `key` option.
 * - A duplicate request gets the stored result; a duplicate event is skipped.
 * - Refusals reach the client as an `RpcException` carrying `{ status, code, message, hint }`.
 * - With `ack: true` on RabbitMQ, each delivery is acked only once its outcome is settled.
 */
export class RpcTransportAdapter implements TransportAdapter {
  readonly defaultInFlight = 'wait' as const;

  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    return messageKeyOf(context, config.keyHeaders);
  }

  describeKeySource(config: ResolvedHandlerConfig, context?: ExecutionContext): string {
    return describeMessageKeySource(context, config.options.header ?? 'Idempotency-Key', Boolean(config.options.key));
  }

  principal(): undefined {
    return undefined;
  }

  fingerprintMaterial(context: ExecutionContext): unknown {
    return context.switchToRpc().getData() ?? null;
  }

  captureValue(_context: ExecutionContext, value: unknown): StoredOutcome {
    const reason = unstorableReason(value);
    return reason ? { kind: 'unstorable', reason } : { kind: 'value', value: encodeValue(value) };
  }

  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    return { kind: 'error', error: isRpcExceptionLike(error) ? encodeRpcException(error) : encodeError(error) };
  }

  async replay(context: ExecutionContext, outcome: StoredOutcome): Promise<unknown> {
    // Nobody waits for an event's result: a duplicate event is simply skipped.
    if (isEventHandler(context)) return NO_REPLY;
    if (outcome.kind === 'value') return decodeValue(outcome.value);
    await loadRpcException();
    if (outcome.kind === 'unstorable') throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    // A cached RpcException goes back to the client exactly as the first time; any
    // other cached error becomes "Internal server error" again in Nest's RPC filter.
    throw isEncodedRpcException(outcome.error)
      ? rpcExceptionOf(outcome.error.props!.rpcError as string | object)
      : decodeError(outcome.error);
  }

  toTransportError(context: ExecutionContext, error: IdempotencyError): unknown {
    if (isEventHandler(context)) {
      // Nest's RPC filter forwards an RpcException without logging it, and an event has no
      // client to receive it: say here why the event was not processed.
      logger.warn(
        `${context.getClass().name}.${context.getHandler().name} refused an event: ${error.code}: ${error.message} ${error.hint}`,
      );
    }
    return rpcExceptionOf(rpcErrorBodyOf(error));
  }

  async settle(context: ExecutionContext, config: ResolvedHandlerConfig, settlement: Settlement, error?: unknown): Promise<void> {
    // toTransportError runs right after a 'rejected' settlement and needs RpcException loaded.
    if (settlement === 'rejected') await loadRpcException();
    if (config.options.ack !== true) return;
    const delivery = rmqDeliveryOf(context);
    if (!delivery) return;
    const decision = ackDecisionOf(settlement, error);
    if (settleDelivery(delivery.channel, delivery.message, decision) && decision === 'reject') {
      logger.warn(
        `${config.handlerName} rejected RabbitMQ delivery ${String(delivery.message.fields?.deliveryTag)} without requeue ` +
          `(it can never succeed: ${(error as Error | undefined)?.message ?? 'refused'}). Give the queue a dead-letter exchange to keep such messages.`,
      );
    }
  }
}
