import { BadRequestException, Body, Controller, Get, Headers, Inject, NotFoundException, Param, Patch } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { runIdempotentTransaction, updateWithVersion } from '../../../lib/typeorm/index.js';
import { InventoryItem } from '../entities.js';
import { clientKeyOf } from '../idempotency-key.js';
import { DATA_SOURCE } from '../tokens.js';

interface AdjustStock {
  /** Units to add (negative to remove). */
  delta: number;
  /** The `version` the client read with GET; the write fails with 409 if the row moved on since. */
  expectedVersion: number;
}

/**
 * Stock counts edited by several back-office clients at once. Optimistic locking stops
 * lost updates: each write names the version it was based on, and a stale one gets
 * 409 IDEMPOTENCY_OPTIMISTIC_LOCK (re-read, re-apply, new key). The Idempotency-Key
 * makes a retry of the same adjustment replay instead of failing on its own version bump.
 */
@Controller('inventory')
export class InventoryController {
  constructor(@Inject(DATA_SOURCE) private readonly dataSource: DataSource) {}

  @Get(':sku')
  async get(@Param('sku') sku: string) {
    const item = await this.dataSource.getRepository(InventoryItem).findOneBy({ sku });
    if (!item) throw new NotFoundException(`Unknown SKU ${sku}.`);
    return { sku: item.sku, stock: item.stock, version: item.version };
  }

  @Patch(':sku')
  @Idempotent()
  async adjust(@Param('sku') sku: string, @Body() body: AdjustStock, @Headers() headers: Record<string, string | undefined>) {
    if (!Number.isInteger(body?.delta) || !Number.isInteger(body.expectedVersion)) {
      throw new BadRequestException('Send { delta: integer, expectedVersion: integer }.');
    }
    return runIdempotentTransaction(this.dataSource, { key: clientKeyOf(headers), scope: 'adjust-stock', fingerprint: { sku, ...body } }, async (manager) => {
      const item = await manager.findOneBy(InventoryItem, { sku });
      if (!item) throw new NotFoundException(`Unknown SKU ${sku}.`);
      // Computed from the row read in this transaction, written only if it is still at the client's version.
      const stock = item.stock + body.delta;
      const version = await updateWithVersion(manager, InventoryItem, sku, body.expectedVersion, { stock });
      return { sku, stock, version };
    });
  }
}
