/**
 * The TypeORM backend of the harness app: PostgreSQL, or MariaDB / MySQL with
 * `HARNESS_DB=mariadb` (the schema is then the database). With `HARNESS_TRANSACTIONAL=1`
 * the handler is `@Idempotent({ transactional: true })` and writes its effect through
 * the idempotent transaction, so the effect and the record commit together or not at all.
 */
import { ServiceUnavailableException } from '@nestjs/common';
import { getIdempotentEntityManager, TypeOrmIdempotencyStore } from '../../../lib/typeorm/index.js';
import { harnessMariaDataSource } from './mariadb.js';
import { EFFECTS_TABLE, harnessDataSource } from './postgres.js';
import type { Effect } from './invariant.js';

export async function createTypeOrmBackend(options: { schema: string; applicationName: string }) {
  const mariadb = process.env.HARNESS_DB === 'mariadb';
  const dataSource = mariadb ? harnessMariaDataSource(options.schema) : harnessDataSource(options.schema, options.applicationName);
  await dataSource.initialize();
  const insertEffect = mariadb
    ? `INSERT INTO \`${options.schema}\`.${EFFECTS_TABLE} (\`key\`, effect_id, app, pid) VALUES (?, ?, ?, ?)`
    : `INSERT INTO "${options.schema}".${EFFECTS_TABLE} (key, effect_id, app, pid) VALUES ($1, $2, $3, $4)`;
  return {
    store: new TypeOrmIdempotencyStore(dataSource),
    /** Inserts the effect row in the running idempotent transaction. */
    async recordTransactionalEffect(effect: Effect): Promise<void> {
      // The handler's own write failing on a dropped connection is the handler's error to
      // map; like a real app it answers 503 (retry later), the transaction is rolled back.
      await getIdempotentEntityManager()
        .query(insertEffect, [effect.key, effect.effectId, effect.app, effect.pid])
        .catch((error: unknown) => {
          throw new ServiceUnavailableException(`database unavailable: ${(error as Error).message}`);
        });
    },
    close: () => dataSource.destroy(),
  };
}
