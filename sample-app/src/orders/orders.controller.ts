import { BadRequestException, Body, Controller, Get, Headers, Inject, NotFoundException, Param, ParseIntPipe, Post } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { applyTransition, runIdempotentTransaction } from '../../../lib/typeorm/index.js';
import { InventoryItem, Order, type OrderState } from '../entities.js';
import { clientKeyOf } from '../idempotency-key.js';
import { OrderEventsPublisher } from '../messages/order-events.publisher.js';
import { DATA_SOURCE } from '../tokens.js';
import { orderLifecycle } from './order-lifecycle.js';

interface CreateOrder {
  sku: string;
  quantity: number;
}

@Controller('orders')
export class OrdersController {
  constructor(
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
    private readonly events: OrderEventsPublisher,
  ) {}

  /** A client retrying "create order" after a timeout must not create two orders. */
  @Post()
  @Idempotent()
  async create(@Body() body: CreateOrder, @Headers() headers: Record<string, string | undefined>) {
    if (typeof body?.sku !== 'string' || !Number.isInteger(body.quantity) || body.quantity <= 0) {
      throw new BadRequestException('Send { sku: string, quantity: positive integer }.');
    }
    const idemKey = clientKeyOf(headers);
    return runIdempotentTransaction(this.dataSource, { key: idemKey, scope: 'create-order', fingerprint: body }, async (manager) => {
      if (!(await manager.existsBy(InventoryItem, { sku: body.sku }))) throw new NotFoundException(`Unknown SKU ${body.sku}.`);
      const order = await manager.save(manager.create(Order, { idemKey, sku: body.sku, quantity: body.quantity, status: 'pending' }));
      return { id: order.id, sku: order.sku, quantity: order.quantity, status: order.status };
    });
  }

  /**
   * Moves the order through its lifecycle. No Idempotency-Key needed: the state machine
   * makes a repeated transition a no-op, and "order N became X" is the key of the
   * transaction that also publishes the event, so a retried "pay" emits `order.paid` once.
   */
  @Post(':id/transitions')
  @Idempotent({ required: false })
  async transition(@Param('id', ParseIntPipe) id: number, @Body() body: { to: OrderState }) {
    if (!orderLifecycle.isState(body?.to)) {
      throw new BadRequestException(`Send { to: one of ${orderLifecycle.states.join(', ')} }.`);
    }
    const to = body.to;
    const outcome = await runIdempotentTransaction(this.dataSource, { key: `${id}:${to}`, scope: 'order-transition' }, async (manager) => {
      if (!(await manager.existsBy(Order, { id }))) throw new NotFoundException(`Order ${id} does not exist.`);
      const result = await applyTransition(manager, Order, id, orderLifecycle, to);
      return { id, from: result.from, status: to, applied: result.applied };
    });
    // Published after the commit, and again when a retry replays the transition: at least
    // once, never zero times. The message id is derived from the order, so the consumer
    // drops the duplicates.
    if (outcome.applied && to === 'paid') await this.events.publishOrderPaid(id);
    return outcome;
  }

  @Get(':id')
  async get(@Param('id', ParseIntPipe) id: number) {
    const order = await this.dataSource.getRepository(Order).findOneBy({ id });
    if (!order) throw new NotFoundException(`Order ${id} does not exist.`);
    return { id: order.id, sku: order.sku, quantity: order.quantity, status: order.status, version: order.version };
  }
}
