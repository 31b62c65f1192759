import { makeIdempotent } from '../../lib/core/make-idempotent.js';
import { IdempotencyRecordEntity, IdempotencyStepEntity, TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { createPgDataSource, createSqljsDataSource } from './support.js';

/** A result as large as the default maxResponseBytes (1 MiB) allows, run once and replayed. */
async function expectLargestDefaultResultReplays(store: TypeOrmIdempotencyStore): Promise<void> {
  await store.verify();
  let runs = 0;
  // 500 Ki two-byte characters: a little under 1 MiB once serialized.
  const wrapped = makeIdempotent(
    async () => {
      runs++;
      return { blob: 'é'.repeat(500 * 1024) };
    },
    { store, key: () => 'big', scope: 'capacity' },
  );
  const first = await wrapped();
  expect(await wrapped()).toEqual(first);
  expect(runs).toBe(1);
}

// The synchronized entity's result column holds the default maxResponseBytes on every
// database (the MySQL / MariaDB case: test/typeorm/mariadb/result-capacity.mariadb.spec.ts).
describe('IdempotencyRecordEntity holds the largest default result', () => {
  it('on PostgreSQL', async () => {
    const db = await createPgDataSource({ entities: [IdempotencyRecordEntity, IdempotencyStepEntity], poolSize: 2 });
    try {
      const [{ type }] = await db.dataSource.query(
        "SELECT data_type AS type FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idempotency_records' AND column_name = 'result'",
        [db.schema],
      );
      expect(type).toBe('text');
      await expectLargestDefaultResultReplays(new TypeOrmIdempotencyStore(db.dataSource, { entity: IdempotencyRecordEntity }));
    } finally {
      await db.destroy();
    }
  });

  it('on SQLite (sql.js)', async () => {
    const dataSource = await createSqljsDataSource({ entities: [IdempotencyRecordEntity, IdempotencyStepEntity] });
    try {
      await expectLargestDefaultResultReplays(new TypeOrmIdempotencyStore(dataSource, { entity: IdempotencyRecordEntity }));
    } finally {
      await dataSource.destroy();
    }
  });
});
