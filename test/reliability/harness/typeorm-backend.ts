/**
 * The TypeORM (PostgreSQL) backend of the harness app. With `HARNESS_TRANSACTIONAL=1`
 * the handler is `@Idempotent({ transactional: true })` and writes its effect through
 * the idempotent transaction, so the effect and the record commit together or not at all.
 */
import { ServiceUnavailableException } from '@nestjs/common';
import { getIdempotentEntityManager, TypeOrmIdempotencyStore } from '../../../lib/typeorm/index.js';
import { EFFECTS_TABLE, harnessDataSource } from './postgres.js';
import type { Effect } from './invariant.js';

export async function createTypeOrmBackend(options: { schema: string; applicationName: string }) {
  const dataSource = harnessDataSource(options.schema, options.applicationName);
  await dataSource.initialize();
  return {
    store: new TypeOrmIdempotencyStore(dataSource),
    /** Inserts the effect row in the running idempotent transaction. */
    async recordTransactionalEffect(effect: Effect): Promise<void> {
      // The handler's own write failing on a dropped connection is the handler's error to
      // map; like a real app it answers 503 (retry later), the transaction is rolled back.
      await getIdempotentEntityManager()
        .query(`INSERT INTO "${options.schema}".${EFFECTS_TABLE} (key, effect_id, app, pid) VALUES ($1, $2, $3, $4)`, [
          effect.key,
          effect.effectId,
          effect.app,
          effect.pid,
        ])
        .catch((error: unknown) => {
          throw new ServiceUnavailableException(`database unavailable: ${(error as Error).message}`);
        });
    },
    close: () => dataSource.destroy(),
  };
}
