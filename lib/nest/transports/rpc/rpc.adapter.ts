import { Logger, type ExecutionContext } from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  IdempotencyErrorCode,
  IdempotencyNotReplayableError,
  decodeValue,
  encodeError,
  valueOutcome,
  type IdempotencyError,
  type StoredOutcome,
} from '../../../core/index.js';
import { IDEMPOTENT_METADATA } from '../../idempotency.constants.js';
import type { IdempotentOptions } from '../../idempotency.options.js';
import { NO_REPLY, type ResolvedHandlerConfig, type Settlement } from '../../transport.adapter.js';
import { keyHeadersOf, NO_HEADERS, type BaseHandlerConfig, type HandlerSite, type MergedOptions, type Transport } from '../transport.js';
import {
  describeMessageKeySource,
  isEventHandler,
  messageKeyOf,
  rmqDeliveryOf,
  transportContextOf,
  transportOf,
  type MessageTransport,
} from './message-context.js';
import {
  ackDecisionOf,
  claimDelivery,
  isAnsweredRequest,
  sendDecision,
  settleDelivery,
  settleFailedDelivery,
} from './rmq-acknowledgement.js';
import { isWatchingRmqConsumers, rmqConsumerOf, watchRmqConsumers } from './rmq-consumers.js';
import { declaredTransportOf, isMessageHandler, messageOperationOf } from './message-operation.js';
import { DEFAULT_MAX_DELIVERIES } from './rmq-dead-letter.js';
import { encodeRpcException, isRpcExceptionLike, loadRpcException, replayedRpcError, rpcErrorBodyOf, rpcExceptionOf } from './rpc-error.js';

export { isIdempotencyRpcError, type IdempotencyRpcError } from './rpc-error.js';

/** Where the RPC transport writes what it refused (an event nobody answers, an `ack: true` it cannot honour). */
const logger = new Logger('Idempotency');

/**
 * Microservice handlers (`@MessagePattern` / `@EventPattern`) on every Nest transport.
 *
 * - Key: the `key` option, else the transport's own message id (RabbitMQ
 *   `properties.messageId`, NATS `Idempotency-Key` / `Nats-Msg-Id` header, Kafka
 *   `idempotency-key` header, MQTT 5 user property); TCP, Redis and gRPC need the `key` option.
 * - A duplicate request gets the stored result; a duplicate event is skipped.
 * - Refusals reach the client as an `RpcException` carrying `{ status, code, message, hint }`.
 * - With `ack: true` on RabbitMQ, each delivery is acked only once its outcome is settled,
 *   and a message that keeps failing is dead-lettered after `maxDeliveries`.
 */
export class RpcTransportAdapter implements Transport {
  readonly name = 'rpc';
  readonly reach = 'request' as const;
  readonly defaultInFlight = 'wait' as const;
  /** Handlers whose `ack: true` misconfiguration was reported where it could not be thrown. */
  private readonly reportedRefusals = new WeakSet<ResolvedHandlerConfig>();

  /**
   * Called when a module's runtime is created, before any microservice connects: the
   * consumers' settings must be watched before the first message, which may be the one to refuse.
   */
  attach(): void {
    void watchRmqConsumers();
  }

  /** `@MessagePattern()` and `@EventPattern()` handlers. */
  recognises(site: HandlerSite): boolean {
    return isMessageHandler(site.method);
  }

  /** `ack: true` on a handler bound to a transport without manual acknowledgement (`@MessagePattern(p, Transport.NATS)`). */
  validate(where: string, _merged: MergedOptions, own: IdempotentOptions, site: HandlerSite): void {
    const bound = declaredTransportOf(site.method);
    if (own.ack === true && bound !== undefined && bound !== 'RMQ') {
      throw new IdempotencyConfigurationError(
        `${where}: ack: true needs a transport with manual acknowledgement, and this handler is bound to ${bound}, which has none here.`,
        'Remove ack from this handler; ack: true is for RabbitMQ consumers with noAck: false.',
      );
    }
  }

  configure(base: BaseHandlerConfig): ResolvedHandlerConfig {
    return { ...base, keyHeaders: keyHeadersOf(base.options), replayHeaders: NO_HEADERS };
  }

  /** `rmq refund.create`: the transport and the declared pattern. */
  operationOf(context: ExecutionContext): string {
    return messageOperationOf(context);
  }

  /** Refuses before anything runs (a `key` option included): in auto-ack mode any ack would close the channel. */
  admit(context: ExecutionContext, config: ResolvedHandlerConfig): void | Promise<void> {
    if (config.options.ack !== true) return;
    if (!isWatchingRmqConsumers()) return watchRmqConsumers().then(() => this.admit(context, config));
    const refusal = ackRefusalOf(context, config);
    if (refusal) throw refusal;
  }

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
    return valueOutcome(value, 'json');
  }

  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    return { kind: 'error', error: isRpcExceptionLike(error) ? encodeRpcException(error) : encodeError(error) };
  }

  async replay(context: ExecutionContext, outcome: StoredOutcome, config?: ResolvedHandlerConfig): Promise<unknown> {
    // Nobody waits for an event's result: a duplicate event is simply skipped.
    if (isEventHandler(context)) return NO_REPLY;
    if (outcome.kind === 'value') return decodeValue(outcome.value);
    await loadRpcException();
    if (outcome.kind === 'unstorable') throw this.toTransportError(context, new IdempotencyNotReplayableError(outcome.reason));
    // Thrown again to the application's RPC exception filters, on its class where
    // cacheErrors lists it: the client gets what it got the first time (a cached
    // RpcException its payload; an error no filter maps "Internal server error").
    throw replayedRpcError(outcome.error, config?.policy.errorClasses);
  }

  prepareErrors(): Promise<unknown> {
    return loadRpcException();
  }

  toTransportError(context: ExecutionContext, error: IdempotencyError): unknown {
    // Configuration errors are logged where they are reported, rate-limited: not once per event.
    if (isEventHandler(context) && error.code !== IdempotencyErrorCode.Configuration) {
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
    if (!isWatchingRmqConsumers()) await watchRmqConsumers();
    const refusal = ackRefusalOf(context, config);
    if (refusal) {
      // Nothing may be acked. Where an error still reaches the caller it carries the
      // refusal (and the interceptor reports it); a failure or cancellation cannot carry it.
      if (settlement === 'stored' || settlement === 'replayed' || settlement === 'unprotected') throw refusal;
      if (settlement !== 'rejected' && !this.reportedRefusals.has(config)) {
        this.reportedRefusals.add(config);
        logger.error(`${refusal.code}: ${refusal.message}`);
      }
      return;
    }
    const delivery = rmqDeliveryOf(context);
    if (!delivery) return;
    if (settlement === 'failed') {
      if (!claimDelivery(delivery.message)) return;
      if (!isEventHandler(context) && isAnsweredRequest(delivery.message)) {
        // Nest sends the error to the caller's replyTo: the caller holds the outcome and
        // owns the retry (its retry with the same messageId runs again, the key being
        // released). A requeue would run the handler again behind its back and answer a
        // correlationId it no longer listens to: told "failed", it would see the effect
        // happen anyway.
        sendDecision(delivery.channel, delivery.message, 'ack');
        return;
      }
      await settleFailedDelivery(delivery.channel, delivery.message, {
        handler: config.handlerName,
        error,
        limit: config.options.maxDeliveries ?? DEFAULT_MAX_DELIVERIES,
        store: config.policy.store,
        ttl: config.policy.ttl,
        leaseTtl: config.policy.leaseTtl,
      });
      return;
    }
    const decision = ackDecisionOf(settlement, error);
    if (settleDelivery(delivery.channel, delivery.message, decision) && decision === 'reject') {
      logger.warn(
        `${config.handlerName} rejected RabbitMQ delivery ${String(delivery.message.fields?.deliveryTag)} without requeue ` +
          `(it can never succeed: ${(error as Error | undefined)?.message ?? 'refused'}). Give the queue a dead-letter exchange to keep such messages.`,
      );
    }
  }
}

const TRANSPORT_NAMES: Record<MessageTransport, string> = {
  rmq: 'RabbitMQ',
  nats: 'NATS',
  kafka: 'Kafka',
  mqtt: 'MQTT',
  other: 'This transport',
};

/**
 * Why this delivery cannot be acknowledged by the library although the handler says
 * `ack: true`, or `undefined` when it can (or when nothing is known against it).
 */
function ackRefusalOf(context: ExecutionContext, config: ResolvedHandlerConfig): IdempotencyConfigurationError | undefined {
  const transport = transportOf(transportContextOf(context));
  if (transport !== 'rmq') {
    // Judged on the handler's own options, as on HTTP: a module-wide `ack: true` in an
    // application with several transports is meant for its RabbitMQ consumers.
    const own = Reflect.getMetadata(IDEMPOTENT_METADATA, context.getHandler()) as IdempotentOptions | undefined;
    if (own?.ack !== true) return undefined;
    return new IdempotencyConfigurationError(
      `@Idempotent({ ack: true }) on ${config.handlerName}: ${TRANSPORT_NAMES[transport]} messages have no acknowledgement the library can send; only RabbitMQ (Transport.RMQ with noAck: false) has.`,
      transport === 'kafka'
        ? "Remove ack from this handler: Nest's Kafka consumer commits offsets itself."
        : 'Remove ack from this handler, or consume these messages from RabbitMQ with noAck: false.',
    );
  }
  const delivery = rmqDeliveryOf(context);
  if (!delivery || rmqConsumerOf(delivery.channel)?.noAck !== true) return undefined;
  return new IdempotencyConfigurationError(
    `@Idempotent({ ack: true }) on ${config.handlerName}: its RabbitMQ consumer is in auto-ack mode (noAck: true, Nest's default), where the broker forgets each message as it sends it and an ack from the library would close the channel (PRECONDITION_FAILED - unknown delivery tag).`,
    'Set noAck: false in the options of the RMQ microservice (Transport.RMQ), so that messages are acked only once their result is stored; or remove ack: true.',
  );
}
