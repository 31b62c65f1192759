import { randomUUID } from 'node:crypto';
import { DrizzleIdempotencyStore } from '../../lib/drizzle/index.js';
import { assumeClaimReturning, claimReturningOf } from '../../lib/sql/dialects/mysql-server.js';
import { DrizzleSqlDatabase } from '../../lib/drizzle/drizzle-database.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import { createMysqlDrizzle, createPgDrizzle, waitUntil } from './support.js';

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

describe.each([
  ['PostgreSQL', () => createPgDrizzle({ poolSize: 6 })],
  ['MariaDB', () => createMysqlDrizzle({ poolSize: 6 })],
] as const)('DrizzleIdempotencyStore purge and isolation (%s)', (_name, makeFixture) => {
  let fixture: Awaited<ReturnType<typeof makeFixture>>;
  const key = () => 'k' + randomUUID().replace(/-/g, '');

  beforeAll(async () => {
    fixture = await makeFixture();
  });
  afterAll(async () => {
    await fixture.destroy();
  });

  it('purges dead leases, expired results and steps in batches, one instance at a time', async () => {
    const store = new DrizzleIdempotencyStore(fixture.db, { tableName: 'purged', purgeBatchSize: 2 });
    await store.ensureTable();
    const live = key();
    await store.claim(live, { token: randomUUID(), leaseTtl: 60_000 });
    const dead: string[] = [];
    for (let i = 0; i < 5; i++) {
      const k = key();
      const token = randomUUID();
      await store.claim(k, { token, leaseTtl: 60_000 });
      await store.saveStep(k, token, { step: 's', result: 'r', ttl: 1 });
      await store.complete(k, token, { result: 'r', ttl: 1 });
      dead.push(k);
    }
    await waitUntil(async () => (await store.get(dead[4])) === undefined, { what: 'the 1 ms retentions to pass' });
    // Two purges at once: the advisory lock lets one run; the other skips.
    const [one, other] = await Promise.all([store.purgeExpired(), store.purgeExpired()]);
    const ran = [one, other].filter((result) => result.ran);
    expect(ran.length).toBeGreaterThanOrEqual(1);
    const second = new DrizzleIdempotencyStore(fixture.db, { tableName: 'purged' });
    const [a, b] = await Promise.all([store.purgeExpired(), second.purgeExpired()]);
    expect(a.ran || b.ran).toBe(true);
    // A run deletes the records in batches, then one batch of steps (lib/sql/records.ts): later runs take the rest.
    let total = [one, other, a, b].reduce((sum, result) => sum + result.deleted, 0);
    for (let run = 0; run < 5; run++) total += (await store.purgeExpired()).deleted;
    expect(total).toBe(10);
    expect(await store.get(live)).toMatchObject({ status: 'in_progress' });
    expect(await store.loadSteps(dead[0])).toEqual({});
  });

  it('runs the background purge once the store is known to work', async () => {
    const purged: number[] = [];
    const store = new DrizzleIdempotencyStore(fixture.db, {
      tableName: 'scheduled',
      purgeInterval: 50,
      onPurge: (result) => void purged.push(result.deleted),
    });
    try {
      await store.ensureTable();
      const k = key();
      const token = randomUUID();
      await store.claim(k, { token, leaseTtl: 1 });
      await waitUntil(() => purged.some((deleted) => deleted > 0), { what: 'a scheduled purge to delete the dead lease' });
    } finally {
      await store.close();
    }
  });
});

describe('DrizzleIdempotencyStore transactions under stricter isolation (PostgreSQL)', () => {
  let fixture: Awaited<ReturnType<typeof createPgDrizzle>>;
  beforeAll(async () => {
    fixture = await createPgDrizzle({ poolSize: 12 });
  });
  afterAll(async () => {
    await fixture.destroy();
  });

  it.each(['REPEATABLE READ', 'SERIALIZABLE'] as const)('still replays to duplicates that waited under %s', async (isolationLevel) => {
    const store = new DrizzleIdempotencyStore(fixture.db, {
      tableName: `iso_${isolationLevel.split(' ')[0].toLowerCase()}`,
      isolationLevel,
    });
    await store.ensureTable();
    const request = { key: key(), ttl: 60_000 };
    let runs = 0;
    const work = async () => {
      runs++;
      // Keeps the first transaction open until the duplicates queue on its row.
      await waitUntil(
        async () => {
          const { rows } = await fixture.pool.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`,
          );
          return rows[0].n >= 5;
        },
        { what: 'five duplicates waiting' },
      );
      return { value: 'v', result: 'stored' };
    };
    const outcomes = await Promise.all(Array.from({ length: 6 }, () => store.runTransactional(request, work)));
    expect(runs).toBe(1);
    expect(outcomes.filter((outcome) => outcome.kind === 'replay')).toEqual(Array(5).fill({ kind: 'replay', result: 'stored' }));
  });

  function key() {
    return 'k' + randomUUID().replace(/-/g, '');
  }
});
