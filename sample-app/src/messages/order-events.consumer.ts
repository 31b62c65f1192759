import { Inject, Injectable } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { IdempotencyService, makeIdempotent, type IdempotentFunction } from '../../../lib/index.js';
import { applyTransition, retryOnOptimisticLock, runIdempotentTransaction, updateWithVersion } from '../../../lib/typeorm/index.js';
import { InventoryItem, Order, Shipment } from '../entities.js';
import { orderLifecycle } from '../orders/order-lifecycle.js';
import { DATA_SOURCE } from '../tokens.js';
import type { OrderPaidMessage } from './order-events.js';

export interface ShipmentResult {
  readonly messageId: string;
  readonly orderId: number;
  readonly shipmentId: number;
}

/**
 * Consumes `order.paid`: reserves the stock and creates the shipment. Brokers deliver at
 * least once, so every message may arrive again (after a timeout, a crash, a rebalance),
 * even while the first delivery is still running. Two layers, keyed by the message id:
 *
 * - `makeIdempotent` on the shared idempotency store: concurrent redeliveries wait for
 *   the first and get its result without touching the database.
 * - `executeIdempotentTransaction`: the shipment, the stock change, the order transition
 *   and the record commit together, so a redelivery after a crash, or after the store
 *   lost its record, still ships once.
 *
 * Acknowledge only after `handle()` resolves: then the effect is committed.
 */
@Injectable()
export class OrderEventsConsumer {
  /** Deliveries that ran the database transaction (for /stats and the demo). */
  transactionsRun = 0;
  readonly handle: IdempotentFunction<[OrderPaidMessage], Promise<ShipmentResult>>;

  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    idempotency: IdempotencyService,
  ) {
    this.handle = makeIdempotent((message: OrderPaidMessage) => this.ship(message), {
      store: idempotency.store,
      scope: 'order-events.order-paid',
      key: (message) => message.id,
      fingerprint: (message) => message.orderId,
      inFlight: 'wait',
    });
  }

  private async ship(message: OrderPaidMessage): Promise<ShipmentResult> {
    this.transactionsRun++;
    return runIdempotentTransaction(this.dataSource, { key: message.id, scope: 'order-events' }, async (manager) => {
      const order = await manager.findOneByOrFail(Order, { id: message.orderId });
      // The stock row is hot (every order of the SKU): a version-checked update, retried on conflict.
      await retryOnOptimisticLock(async () => {
        const item = await manager.findOneByOrFail(InventoryItem, { sku: order.sku });
        await updateWithVersion(manager, InventoryItem, item.sku, item.version, { stock: item.stock - order.quantity });
      });
      const shipment = await manager.save(manager.create(Shipment, { idemKey: message.id, orderId: order.id, sku: order.sku, quantity: order.quantity }));
      await applyTransition(manager, Order, order.id, orderLifecycle, 'shipped');
      return { messageId: message.id, orderId: order.id, shipmentId: shipment.id };
    });
  }
}
