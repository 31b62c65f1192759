import { DrizzleIdempotencyStore } from '../../lib/drizzle/index.js';
import { assumeClaimReturning, claimReturningOf } from '../../lib/sql/dialects/mysql-server.js';
import { DrizzleSqlDatabase } from '../../lib/drizzle/drizzle-database.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { createMysqlDrizzle, createPgDrizzle } from './support.js';

// The contract on each server: PostgreSQL, MariaDB with its claim (INSERT ... RETURNING),
// and MariaDB running MySQL 8's statements (no RETURNING: the insert id, then a read).
describeStoreContract('DrizzleIdempotencyStore (PostgreSQL, node-postgres)', async () => {
  const fixture = await createPgDrizzle({ poolSize: 10 });
  const store = new DrizzleIdempotencyStore(fixture.db);
  await store.ensureTable();
  return { store, dispose: () => fixture.destroy() };
});

describeStoreContract('DrizzleIdempotencyStore (MariaDB, mysql2)', async () => {
  const fixture = await createMysqlDrizzle({ poolSize: 10 });
  const store = new DrizzleIdempotencyStore(fixture.db);
  await store.ensureTable();
  // The boot check reads the result column's capacity, the key collation and max_allowed_packet.
  await store.verify({ maxResponseBytes: 4_000_000 });
  expect(await claimReturningOf(DrizzleSqlDatabase.of(fixture.db, 'test'))).toBe(true);
  return { store, dispose: () => fixture.destroy() };
});

describeStoreContract('DrizzleIdempotencyStore (MySQL 8 statements on MariaDB, mysql2)', async () => {
  const fixture = await createMysqlDrizzle({ poolSize: 10 });
  assumeClaimReturning(fixture.db, false);
  const store = new DrizzleIdempotencyStore(fixture.db);
  await store.ensureTable();
  return { store, dispose: () => fixture.destroy() };
});
