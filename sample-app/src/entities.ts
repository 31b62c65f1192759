import { Column, CreateDateColumn, Entity, PrimaryColumn, PrimaryGeneratedColumn } from 'typeorm';
import { IdempotentEntity, VersionedEntity } from '../../lib/typeorm/index.js';

// Amounts are integer cents; every table has a `version` column (optimistic locking).

@Entity('accounts')
export class Account extends VersionedEntity {
  @PrimaryColumn({ type: 'varchar', length: 64 })
  id: string;

  @Column('int')
  balance: number;
}

/** One row per refund webhook: `idemKey` is the webhook's Idempotency-Key under a unique index. */
@Entity('refunds')
export class Refund extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column({ type: 'varchar', length: 64 })
  accountId: string;

  @Column('int')
  amount: number;

  @Column({ type: 'varchar', length: 255 })
  reason: string;
}

export const ORDER_STATES = ['pending', 'paid', 'shipped', 'delivered', 'cancelled', 'refunded'] as const;
export type OrderState = (typeof ORDER_STATES)[number];

@Entity('orders')
export class Order extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column({ type: 'varchar', length: 64 })
  sku: string;

  @Column('int')
  quantity: number;

  @Column({ type: 'varchar', length: 16 })
  status: OrderState;

  @CreateDateColumn()
  createdAt: Date;
}

@Entity('inventory_items')
export class InventoryItem extends VersionedEntity {
  @PrimaryColumn({ type: 'varchar', length: 64 })
  sku: string;

  @Column('int')
  stock: number;
}

/** One row per consumed `order.paid` message: `idemKey` is the message id. */
@Entity('shipments')
export class Shipment extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('int')
  orderId: number;

  @Column({ type: 'varchar', length: 64 })
  sku: string;

  @Column('int')
  quantity: number;
}

/** One row per completed checkout. */
@Entity('checkouts')
export class Checkout extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column({ type: 'varchar', length: 64 })
  cartId: string;

  @Column('int')
  total: number;
}

/** One row per settlement run (the job guarded by a distributed lock). */
@Entity('settlements')
export class Settlement extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column({ type: 'varchar', length: 32 })
  day: string;

  @Column('int')
  refundsTotal: number;
}

export const ENTITIES = [Account, Refund, Order, InventoryItem, Shipment, Checkout, Settlement];
