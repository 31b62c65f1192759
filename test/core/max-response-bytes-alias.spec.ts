import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { IdempotencyConfigurationError, MemoryIdempotencyStore, makeIdempotent, type MakeIdempotentOptions } from '../../lib/index.js';
import {
  IdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
  parseTableName,
  recordsTableDdl,
  stepsTableDdl,
} from '../../lib/typeorm/index.js';
import { createMariaDataSource } from '../typeorm/mariadb/support.js';

/**
 * Issue 26: one name for the size limit. `maxResponseBytes` (the module's name) is
 * accepted by `makeIdempotent` and `TypeOrmIdempotencyStore`; `maxResultBytes` stays a
 * deprecated alias; both with different values is refused; a message names what was written.
 */

function wrap(options: Partial<MakeIdempotentOptions<[]>>) {
  return () =>
    makeIdempotent(async () => 'x'.repeat(2_000), { store: new MemoryIdempotencyStore(), key: () => 'k', scope: 'big', ...options });
}

describe('makeIdempotent: maxResponseBytes, and maxResultBytes its deprecated alias', () => {
  it.each([
    ['maxResponseBytes', { maxResponseBytes: 100 }],
    ['maxResultBytes (deprecated)', { maxResultBytes: 100 }],
    ['both, equal', { maxResponseBytes: 100, maxResultBytes: 100 }],
  ])('%s bounds what is stored', async (_name, options) => {
    const big = wrap(options)();
    expect(await big()).toHaveLength(2_000);
    await expect(big()).rejects.toMatchObject({ code: 'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE' });
  });

  it('stores a result under the limit with either name', async () => {
    for (const options of [{ maxResponseBytes: 10_000 }, { maxResultBytes: 10_000 }]) {
      let runs = 0;
      const fn = makeIdempotent(async () => ++runs, { store: new MemoryIdempotencyStore(), key: () => 'k', scope: 'small', ...options });
      expect([await fn(), await fn()]).toEqual([1, 1]);
    }
  });

  it('refuses both names with different values, naming both', () => {
    expect(wrap({ maxResponseBytes: 100, maxResultBytes: 200 })).toThrow(IdempotencyConfigurationError);
    expect(wrap({ maxResponseBytes: 100, maxResultBytes: 200 })).toThrow(
      /makeIdempotent\(big\): maxResponseBytes \(100\) and maxResultBytes \(200\) are one option under two names.*Keep maxResponseBytes only/,
    );
  });

  it('names the option the user wrote in a message', () => {
    expect(wrap({ maxResponseBytes: '100' as never })).toThrow(
      /makeIdempotent\(big\): maxResponseBytes must be a whole number above 0, got "100"/,
    );
    expect(wrap({ maxResultBytes: 0 })).toThrow(/makeIdempotent\(big\): maxResultBytes must be a whole number above 0, got 0/);
    expect(wrap({ maxResultBytes: 1.5 })).toThrow(/Write maxResultBytes: 1_048_576/);
  });
});

describe('TypeOrmIdempotencyStore: maxResponseBytes, and maxResultBytes its deprecated alias', () => {
  // Not initialised: the options are checked in the constructor, before any connection.
  const unopened = new DataSource({ type: 'postgres', host: '127.0.0.1', database: 'test', entities: [IdempotencyRecordEntity] });

  it('checks each under the name written, and refuses both with different values', () => {
    expect(() => new TypeOrmIdempotencyStore(unopened, { maxResponseBytes: -1 })).toThrow(
      /TypeOrmIdempotencyStore: maxResponseBytes must be a whole number above 0, got -1/,
    );
    expect(() => new TypeOrmIdempotencyStore(unopened, { maxResultBytes: -1 })).toThrow(
      /TypeOrmIdempotencyStore: maxResultBytes must be a whole number above 0, got -1/,
    );
    expect(() => new TypeOrmIdempotencyStore(unopened, { maxResponseBytes: 2_048, maxResultBytes: 4_096 })).toThrow(
      /TypeOrmIdempotencyStore: maxResponseBytes \(2048\) and maxResultBytes \(4096\) are one option under two names/,
    );
    expect(() => new TypeOrmIdempotencyStore(unopened, { maxResponseBytes: 2_048, maxResultBytes: 2_048 })).not.toThrow();
  });

  describe('verify() on MariaDB holds the table to either name', () => {
    let db: Awaited<ReturnType<typeof createMariaDataSource>>;
    let table: string;
    beforeAll(async () => {
      db = await createMariaDataSource({ synchronize: false });
      // The migration's table: a MEDIUMTEXT result holds 16 MiB.
      table = `records_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
      for (const statement of recordsTableDdl(parseTableName(table), 'mysql')) await db.dataSource.query(statement);
      for (const statement of stepsTableDdl(parseTableName(table), 'mysql')) await db.dataSource.query(statement);
    }, 60_000);
    afterAll(() => db?.destroy());

    const limit = 17 * 1024 * 1024;
    it.each([
      ['maxResponseBytes', { maxResponseBytes: limit }],
      ['maxResultBytes (deprecated)', { maxResultBytes: limit }],
    ])('%s over 16 MiB: refused for MEDIUMTEXT', async (_name, options) => {
      await expect(new TypeOrmIdempotencyStore(db.dataSource, { tableName: table, ...options }).verify()).rejects.toThrow(
        /MODIFY `result` LONGTEXT/,
      );
    });

    it('within MEDIUMTEXT: accepted', async () => {
      await expect(
        new TypeOrmIdempotencyStore(db.dataSource, { tableName: table, maxResponseBytes: 1 << 20 }).verify(),
      ).resolves.toBeUndefined();
    });
  });
});
