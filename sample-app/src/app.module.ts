import { Inject, Module, type DynamicModule, type OnApplicationShutdown } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { IdempotencyModule, type IdempotencyStore } from '../../lib/index.js';
import type { LockProvider } from '../../lib/locks/index.js';
import { OneTimeTokenModule, type OneTimeTokenStore } from '../../lib/tokens/index.js';
import { CheckoutController } from './checkout/checkout.controller.js';
import { NaiveRefundsController } from './demo/naive-refunds.controller.js';
import { SettlementController } from './settlement/settlement.controller.js';
import type { SampleAppConfig } from './config.js';
import { InventoryController } from './inventory/inventory.controller.js';
import { RefundsController } from './ledger/refunds.controller.js';
import { OrderEventsRmqController } from './messages/amqp.js';
import { MessagesController } from './messages/messages.controller.js';
import { OrderEventsConsumer } from './messages/order-events.consumer.js';
import { OrderEventsPublisher } from './messages/order-events.publisher.js';
import { SampleGraphqlModule } from './graphql/graphql.module.js';
import { RefundJobsModule } from './jobs/refund-jobs.module.js';
import { EventCounter } from './ops/event-counter.js';
import { StatsController } from './ops/stats.controller.js';
import { OrdersController } from './orders/orders.controller.js';
import { ExternalServicesState, Mailer, PaymentProvider } from './refunds/external-services.js';
import { RefundFlow } from './refunds/refund-flow.js';
import { RefundRequestsController } from './refunds/refund-requests.controller.js';
import { DATA_SOURCE, FLOW_STORE, LOCK_PROVIDER, SAMPLE_APP_CONFIG } from './tokens.js';

/** Connections opened before Nest starts (see app.ts), closed when the app closes. */
export interface SampleAppResources {
  readonly dataSource: DataSource;
  /** The idempotency store of every `@Idempotent()` handler: memory, or Redis with REDIS_URL. */
  readonly store: IdempotencyStore;
  /** The refund flow's records and steps: always in the business database (see refunds/refund-flow.ts). */
  readonly flowStore: IdempotencyStore;
  /** Where checkout tokens live: memory, or Redis with REDIS_URL. */
  readonly tokenStore: OneTimeTokenStore;
  /** The locks of the settlement job: memory, or Redis with REDIS_URL. */
  readonly locks: LockProvider;
  /** Closes what was opened besides the DataSource (the Redis client, the RabbitMQ publisher). */
  readonly close: () => Promise<void>;
}

const RESOURCES = Symbol('sample-app:resources');

class ResourcesCloser implements OnApplicationShutdown {
  constructor(
    @Inject(RESOURCES) private readonly resources: SampleAppResources,
    private readonly publisher: OrderEventsPublisher,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    await this.publisher.drain();
    await this.resources.close();
    if (this.resources.dataSource.isInitialized) await this.resources.dataSource.destroy();
  }
}

@Module({})
export class SampleAppModule {
  static register(config: SampleAppConfig, resources: SampleAppResources): DynamicModule {
    const events = new EventCounter();
    return {
      module: SampleAppModule,
      imports: [
        IdempotencyModule.forRoot({
          isGlobal: true,
          store: resources.store,
          ttl: 24 * 60 * 60 * 1000,
          onEvent: events.listener,
        }),
        OneTimeTokenModule.forRoot({ isGlobal: true, store: resources.tokenStore, ttl: 10 * 60_000 }),
        // GraphQL at /graphql: the idempotent issueGiftCard mutation.
        SampleGraphqlModule,
        // Refund payouts on a BullMQ worker, when BULLMQ_URL is set (empty otherwise).
        RefundJobsModule.fromEnv(),
      ],
      controllers: [
        RefundsController,
        RefundRequestsController,
        OrdersController,
        InventoryController,
        MessagesController,
        OrderEventsRmqController,
        CheckoutController,
        SettlementController,
        StatsController,
        // The anti-example the demo contrasts with; never part of a real service.
        ...(config.demoHooks ? [NaiveRefundsController] : []),
      ],
      providers: [
        { provide: SAMPLE_APP_CONFIG, useValue: config },
        { provide: DATA_SOURCE, useValue: resources.dataSource },
        { provide: LOCK_PROVIDER, useValue: resources.locks },
        { provide: FLOW_STORE, useValue: resources.flowStore },
        { provide: RESOURCES, useValue: resources },
        { provide: EventCounter, useValue: events },
        OrderEventsConsumer,
        OrderEventsPublisher,
        // POST /refunds: the refund flow with durable steps, and the fakes it calls.
        RefundFlow,
        ExternalServicesState,
        PaymentProvider,
        Mailer,
        ResourcesCloser,
      ],
    };
  }
}
