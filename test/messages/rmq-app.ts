import { Controller, Injectable, Module, UseGuards, type CanActivate, type ExecutionContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, MessagePattern, Payload, Transport, type MicroserviceOptions, type RmqContext } from '@nestjs/microservices';
import type { INestMicroservice } from '@nestjs/common';
import { Idempotent, IdempotencyModule, type IdempotencyEvent, type IdempotencyStore } from '../../lib/index.js';
import { normalizeIdempotencyKey, storageKeyOf } from '../../lib/core/index.js';
import { scopeOf } from '../../lib/nest/index.js';
import { ChannelObserver, Effects, NEST_LOGGER, RABBITMQ_URL, sleep, waitFor, type Trace } from './support.js';

export interface RefundRequested {
  refundId: string;
  amount: number;
}

/** Everything the consumer shares with a test: what happened, and knobs to steer it. */
export class ConsumerEnv {
  readonly trace: Trace = [];
  readonly observer = new ChannelObserver(this.trace);
  readonly effects = new Effects();
  readonly attempts = new Effects();
  readonly events: IdempotencyEvent[] = [];
  /** Refund ids whose handler throws this many more times before it succeeds. */
  readonly failuresLeft = new Map<string, number>();
  /** Refund ids whose handler throws this error once. */
  readonly throwOnce = new Map<string, Error>();
  /** Runs inside the refund handler before its side effect (close the channel, wait for a duplicate...). */
  beforeRefund?: (data: RefundRequested, context: RmqContext) => Promise<void>;

  onEvent = (event: IdempotencyEvent) => this.events.push(event);

  /**
   * Resolves once a duplicate of `messageId` has arrived while the first delivery runs.
   * `operation` is the scope of the handler's keys: transport, queue and pattern (`rmq queue=idem-refunds-1 refund.requested`).
   */
  async duplicateArrived(operation: string, messageId: string): Promise<void> {
    const key = storageKeyOf(scopeOf(operation), normalizeIdempotencyKey(messageId));
    await waitFor(`a duplicate of ${messageId} in flight`, () => this.events.some((e) => e.type === 'in_flight_conflict' && e.key === key));
  }
}

/**
 * Guards run before interceptors: this one lets the test observe the acks the library
 * makes on the consumer's real channel, even for deliveries whose handler never runs.
 */
export function channelObserverGuard(env: ConsumerEnv): Type<CanActivate> {
  @Injectable()
  class ObserveChannelGuard implements CanActivate {
    canActivate(context: ExecutionContext): boolean {
      env.observer.observe(context.switchToRpc().getContext<RmqContext>().getChannelRef());
      return true;
    }
  }
  return ObserveChannelGuard;
}

export function refundsConsumer(env: ConsumerEnv): Type<unknown> {
  @Controller()
  @UseGuards(channelObserverGuard(env))
  class RefundsConsumer {
    @EventPattern<string>('refund.requested')
    @Idempotent({ ack: true })
    async refund(@Payload() data: RefundRequested, @Ctx() context: RmqContext): Promise<void> {
      env.attempts.hit(data.refundId);
      await env.beforeRefund?.(data, context);
      const error = env.throwOnce.get(data.refundId);
      if (error) {
        env.throwOnce.delete(data.refundId);
        throw error;
      }
      const failures = env.failuresLeft.get(data.refundId) ?? 0;
      if (failures > 0) {
        env.failuresLeft.set(data.refundId, failures - 1);
        throw new Error('payment provider unavailable');
      }
      env.effects.hit(data.refundId);
    }

    /** Keys are optional here: a message without one runs unprotected, and is still acked after the handler. */
    @EventPattern<string>('refund.audit')
    @Idempotent({ ack: true, required: false })
    async audit(@Payload() data: RefundRequested): Promise<void> {
      await sleep(20);
      env.effects.hit(`audit:${data.refundId}`);
      env.trace.push(`audited:${data.refundId}`);
    }

    @MessagePattern('refund.quote')
    @Idempotent({ ack: true })
    async quote(@Payload() data: RefundRequested): Promise<{ refundId: string; amount: number; quoteNo: number }> {
      const quoteNo = env.effects.hit(`quote:${data.refundId}`);
      await sleep(50);
      return { refundId: data.refundId, amount: data.amount, quoteNo };
    }
  }
  return RefundsConsumer;
}

export interface RmqConsumerOptions {
  queue: string;
  store: IdempotencyStore;
  env: ConsumerEnv;
  /** Where rejected (never-succeeding) messages go. */
  deadLetterQueue?: string;
  /** @default the refunds consumer of this file */
  controller?: Type<unknown>;
}

export function rmqQueueOptions(deadLetterQueue?: string): Record<string, unknown> {
  return deadLetterQueue ? { durable: false, deadLetterExchange: '', deadLetterRoutingKey: deadLetterQueue } : { durable: false };
}

/** A standalone RabbitMQ microservice with manual acknowledgement (`noAck: false`). */
export async function startRmqConsumer({ queue, store, env, deadLetterQueue, controller }: RmqConsumerOptions): Promise<INestMicroservice> {
  @Module({ imports: [IdempotencyModule.forRoot({ store, onEvent: env.onEvent })], controllers: [controller ?? refundsConsumer(env)] })
  class RefundsModule {}
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(RefundsModule, {
    transport: Transport.RMQ,
    options: { urls: [RABBITMQ_URL], queue, noAck: false, queueOptions: rmqQueueOptions(deadLetterQueue) },
    logger: NEST_LOGGER,
  });
  await app.listen();
  return app;
}
