import { randomUUID } from 'node:crypto';
import { Column, Entity, PrimaryGeneratedColumn, type DataSource } from 'typeorm';
import { IdempotencyFingerprintMismatchError } from '../../lib/core/errors.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';
import {
  CreateIdempotencyRecords1700000000000,
  IdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
  getIdempotentEntityManager,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { createSqljsDataSource, sleep, waitUntil } from './support.js';

describeStoreContract('TypeOrmIdempotencyStore (SQLite via sql.js)', async () => {
  const dataSource = await createSqljsDataSource({ synchronize: false });
  const store = new TypeOrmIdempotencyStore(dataSource);
  await store.ensureTable();
  return { store, dispose: () => dataSource.destroy() };
});

@Entity('ledger_entries')
class LedgerEntry {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('varchar')
  label: string;
}

describe('TypeOrmIdempotencyStore on SQLite (sql.js)', () => {
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const key = () => 'k' + randomUUID().replace(/-/g, '');

  beforeAll(async () => {
    dataSource = await createSqljsDataSource({ entities: [IdempotencyRecordEntity, LedgerEntry] });
    store = new TypeOrmIdempotencyStore(dataSource);
  });
  afterAll(async () => {
    await dataSource.destroy();
  });

  it('creates the same table from the migration as from the entity', async () => {
    const fresh = await createSqljsDataSource({ entities: [IdempotencyRecordEntity], synchronize: false });
    try {
      const runner = fresh.createQueryRunner();
      await new CreateIdempotencyRecords1700000000000().up(runner);
      await new CreateIdempotencyRecords1700000000000().up(runner);
      expect((await fresh.driver.createSchemaBuilder().log()).upQueries.map((q) => q.query)).toEqual([]);
    } finally {
      await fresh.destroy();
    }
  });

  it('runs concurrent transactions one at a time on the single connection: one executes, duplicates replay', async () => {
    const k = key();
    let runs = 0;
    const results = await Promise.all(
      Array.from({ length: 10 }, () =>
        runIdempotentTransaction(dataSource, { key: k, fingerprint: { amount: 5 } }, async (manager) => {
          runs++;
          const entry = await manager.save(LedgerEntry, { label: k });
          await sleep(5); // lets the other callers queue up meanwhile
          return { entryId: entry.id };
        }),
      ),
    );
    expect(runs).toBe(1);
    expect(new Set(results.map((r) => r.entryId)).size).toBe(1);
    expect(await dataSource.getRepository(LedgerEntry).countBy({ label: k })).toBe(1);
    await expect(runIdempotentTransaction(dataSource, { key: k, fingerprint: { amount: 6 } }, async () => 'x')).rejects.toBeInstanceOf(
      IdempotencyFingerprintMismatchError,
    );
  });

  it('rolls back the business write and the record together when the work throws', async () => {
    const k = key();
    await expect(
      runIdempotentTransaction(dataSource, { key: k }, async (manager) => {
        await manager.save(LedgerEntry, { label: k });
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await dataSource.getRepository(LedgerEntry).countBy({ label: k })).toBe(0);
    expect(
      await runIdempotentTransaction(dataSource, { key: k }, async (manager) => (await manager.save(LedgerEntry, { label: k })).label),
    ).toBe(k);
    expect(await dataSource.getRepository(LedgerEntry).countBy({ label: k })).toBe(1);
  });

  it('lets store calls made inside a transactional handler use the held connection instead of deadlocking', async () => {
    const k = key();
    const inner = key();
    const outcome = await store.runTransactional({ key: k, ttl: 60_000 }, async () => {
      const manager = getIdempotentEntityManager();
      await manager.save(LedgerEntry, { label: k });
      const claim = await store.claim(inner, { token: 't', leaseTtl: 10_000 });
      return { value: claim.claimed, result: '"stored"' };
    });
    expect(outcome).toEqual({ kind: 'executed', value: true });
    expect(await store.get(k)).toMatchObject({ status: 'completed', result: '"stored"' });
    expect(await store.runTransactional({ key: k, ttl: 60_000 }, async () => ({ value: 'again', result: 'x' }))).toEqual({
      kind: 'replay',
      result: '"stored"',
    });
  });

  it('purges expired records', async () => {
    const live = key();
    const dead = key();
    await store.claim(live, { token: 't', leaseTtl: 60_000 });
    await store.claim(dead, { token: 't', leaseTtl: 1 });
    await waitUntil(async () => (await store.get(dead)) === undefined, { what: 'the 1 ms lease to expire' });
    const result = await store.purgeExpired();
    expect(result.ran).toBe(true);
    expect(result.deleted).toBeGreaterThanOrEqual(1);
    const keys = (await dataSource.getRepository(IdempotencyRecordEntity).find()).map((r) => r.key);
    expect(keys).toContain(live);
    expect(keys).not.toContain(dead);
  });
});
