import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { IdempotencyConfigurationError, type IdempotencyEvent } from '../../lib/index.js';
import { IdempotencyEngine, storageKeyOf, type ExecutionPolicy, type StoreErrorStrategy } from '../../lib/core/index.js';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { pgConnection } from '../support/postgres.js';

// A store that raises one of this library's own errors has already said what is wrong:
// a missing table is a configuration error to fix, not an outage to ride out (503) or to
// run unprotected through.
describe('IdempotencyEngine.admit with a store that raises a library error', () => {
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    dataSource = new DataSource({ ...pgConnection, poolSize: 2 });
    await dataSource.initialize();
    // No ensureTable(), no migration: the table does not exist.
    store = new TypeOrmIdempotencyStore(dataSource, { tableName: `missing_${process.pid}_${randomBytes(4).toString('hex')}` });
  });
  afterAll(async () => {
    await store?.close();
    await dataSource?.destroy();
  });

  it.each<StoreErrorStrategy>(['fail-closed', 'fail-open'])(
    'rethrows the IdempotencyConfigurationError as it is (%s), never runs unprotected, and still emits store_error',
    async (onStoreError) => {
      const events: IdempotencyEvent[] = [];
      const policy: ExecutionPolicy = {
        store,
        ttl: 60_000,
        leaseTtl: 30_000,
        inFlight: 'reject',
        waitTimeout: 0,
        onStoreError,
        maxResponseBytes: 1 << 20,
        onEvent: (event) => events.push(event),
      };
      const outcome = await new IdempotencyEngine().admit({ key: storageKeyOf('missing-table', randomUUID()) }, policy).then(
        (admission) => admission,
        (error: unknown) => error,
      );
      expect(outcome).toBeInstanceOf(IdempotencyConfigurationError);
      expect((outcome as Error).message).toMatch(/does not exist/);
      expect(events).toEqual([expect.objectContaining({ type: 'store_error', failOpen: false, error: outcome })]);
    },
  );
});
