import { Controller, Get, Inject } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { Account, Checkout, InventoryItem, Order, Refund, Settlement, Shipment } from '../entities.js';
import { DEMO_ACCOUNT, NAIVE_ACCOUNT } from '../database.js';
import { OrderEventsConsumer } from '../messages/order-events.consumer.js';
import { ExternalServicesState } from '../refunds/external-services.js';
import { DATA_SOURCE } from '../tokens.js';
import { EventCounter } from './event-counter.js';

/**
 * Every side effect, counted from the database (so the numbers survive a restart) and
 * from the fake external services, plus this process's idempotency events. The demo and
 * the e2e tests assert on it.
 */
@Controller('stats')
export class StatsController {
  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    private readonly events: EventCounter,
    private readonly consumer: OrderEventsConsumer,
    private readonly services: ExternalServicesState,
  ) {}

  @Get()
  async stats() {
    const count = (entity: Function) => this.dataSource.getRepository(entity).count();
    const allRefunds = await this.dataSource.getRepository(Refund).find({ select: { idemKey: true, amount: true, accountId: true } });
    // The anti-example's rows (demo/naive-refunds.controller.ts) are counted apart.
    const refunds = allRefunds.filter((r) => r.accountId !== NAIVE_ACCOUNT);
    const shipments = await this.dataSource.getRepository(Shipment).find({ select: { idemKey: true, quantity: true, sku: true } });
    const accounts = await this.dataSource.getRepository(Account).find({ order: { id: 'ASC' } });
    const inventory = await this.dataSource.getRepository(InventoryItem).find({ order: { sku: 'ASC' } });
    return {
      balance: accounts.find((a) => a.id === DEMO_ACCOUNT)?.balance,
      balances: Object.fromEntries(accounts.map((a) => [a.id, a.balance])),
      refunds: { count: refunds.length, total: refunds.reduce((sum, r) => sum + r.amount, 0), keys: refunds.map((r) => r.idemKey) },
      naiveRefunds: allRefunds.length - refunds.length,
      orders: await count(Order),
      shipments: { count: shipments.length, keys: shipments.map((s) => s.idemKey) },
      checkouts: await count(Checkout),
      settlements: await count(Settlement),
      inventory: Object.fromEntries(inventory.map((item) => [item.sku, { stock: item.stock, version: item.version }])),
      consumerTransactionsRun: this.consumer.transactionsRun,
      // The fakes POST /refunds calls: calls received, and effects had per refund reference.
      external: this.services.snapshot(),
      idempotencyEvents: this.events.snapshot(),
    };
  }
}
