import {
  Body,
  Controller,
  HttpException,
  Module,
  Param,
  Post,
  type INestApplication,
  type INestMicroservice,
  type LoggerService,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientsModule, Ctx, EventPattern, Payload, Transport, type MicroserviceOptions, type RmqContext } from '@nestjs/microservices';
import {
  Idempotent,
  IdempotencyModule,
  IdempotencyOutbox,
  type IdempotencyEventListener,
  type IdempotencyStore,
  type OutboxRelayOptions,
} from '../../lib/index.js';
import { Effects, NEST_LOGGER, RABBITMQ_URL } from '../messages/support.js';

/** The refund the API emits once its work committed. */
export interface RefundCompleted {
  refundId: string;
  amount: number;
}

/** What the consumer applied, and the message ids it received. */
export class ConsumerLog {
  readonly effects = new Effects();
  readonly deliveries = new Effects();
  readonly messageIds: string[] = [];
  readonly order: string[] = [];
}

/** An HTTP API whose refund handler emits `refund.completed` through the outbox (and throws for `fail: true`). */
export async function startRefundsApi(options: {
  store: IdempotencyStore;
  queue: string;
  outbox?: OutboxRelayOptions;
  /** False: the module is switched off, as in IdempotencyTestingModule. */
  enabled?: boolean;
  /** The module's logger (configuration errors are written there). @default false */
  logger?: LoggerService | false;
  onEvent?: IdempotencyEventListener;
}): Promise<INestApplication> {
  @Controller('refunds')
  class RefundsController {
    constructor(private readonly outbox: IdempotencyOutbox) {}

    @Post(':id')
    @Idempotent()
    refund(
      @Param('id') refundId: string,
      @Body() body: { amount: number; fail?: boolean; lines?: number },
    ): { refundId: string; messageIds: string[] } {
      const messageIds = [this.outbox.emit('EVENTS', 'refund.completed', { refundId, amount: body.amount })];
      for (let line = 1; line < (body.lines ?? 1); line++) {
        messageIds.push(this.outbox.emit('EVENTS', 'refund.completed', { refundId: `${refundId}#${line}`, amount: body.amount }));
      }
      if (body.fail) throw new HttpException('declined by the provider', 402);
      return { refundId, messageIds };
    }

    /** Emits to a client no module registered. */
    @Post(':id/misrouted')
    @Idempotent()
    misrouted(@Param('id') refundId: string): string {
      return this.outbox.emit('NO_SUCH_CLIENT', 'refund.completed', { refundId });
    }

    /** Emits without an execution around it (no @Idempotent()). */
    @Post(':id/unprotected')
    unprotected(@Param('id') refundId: string): string {
      return this.outbox.emit('EVENTS', 'refund.completed', { refundId, amount: 1 });
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: options.store,
        enabled: options.enabled,
        onEvent: options.onEvent,
        logger: options.logger ?? false,
        outbox: { pollInterval: 100, retryDelay: 50, maxRetryDelay: 500, ...options.outbox },
      }),
      ClientsModule.register([
        {
          name: 'EVENTS',
          transport: Transport.RMQ,
          options: { urls: [RABBITMQ_URL], queue: options.queue, queueOptions: { durable: false } },
        },
      ]),
    ],
    controllers: [RefundsController],
  })
  class ApiModule {}

  const app = await NestFactory.create(ApiModule, { logger: NEST_LOGGER });
  await app.init();
  return app;
}

/** A RabbitMQ consumer whose `@Idempotent({ ack: true })` handler applies each refund once (the inbox). */
export async function startRefundsConsumer(options: {
  store: IdempotencyStore;
  queue: string;
  log: ConsumerLog;
}): Promise<INestMicroservice> {
  const { log } = options;
  @Controller()
  class RefundsConsumer {
    @EventPattern<string>('refund.completed')
    @Idempotent({ ack: true })
    apply(@Payload() refund: RefundCompleted, @Ctx() context: RmqContext): void {
      log.effects.hit(refund.refundId);
      log.order.push(refund.refundId);
      log.messageIds.push(String(context.getMessage().properties.messageId));
    }
  }

  @Module({ imports: [IdempotencyModule.forRoot({ store: options.store })], controllers: [RefundsConsumer] })
  class ConsumerModule {}

  const app = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    transport: Transport.RMQ,
    options: { urls: [RABBITMQ_URL], queue: options.queue, noAck: false, queueOptions: { durable: false } },
    logger: NEST_LOGGER,
  });
  // Every delivery, applied or de-duplicated, passes here first.
  app.useGlobalGuards({
    canActivate: (context) => {
      log.deliveries.hit(context.switchToRpc().getData<RefundCompleted>().refundId);
      return true;
    },
  });
  await app.listen();
  return app;
}
