import { randomUUID } from 'node:crypto';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { IdempotencyModule } from '../../../lib/index.js';
import { IdempotencyConfigurationError, IdempotencyNotReplayableError } from '../../../lib/core/errors.js';
import type { IdempotencyEvent } from '../../../lib/core/events.js';
import { makeIdempotent } from '../../../lib/core/make-idempotent.js';
import { deserializeOutcome } from '../../../lib/core/outcome.js';
import {
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  TypeOrmIdempotencyStore,
  parseTableName,
  recordsTableDdl,
} from '../../../lib/typeorm/index.js';
import { uniqueName } from '../support.js';
import { createMariaDataSource } from './support.js';

const KB100 = 100 * 1024;

/** The records table as the migration makes it, with `result` and the key's collation changed. */
async function createTable(dataSource: DataSource, options: { result?: string; keyCollation?: string } = {}): Promise<string> {
  const table = uniqueName('records');
  let [ddl] = recordsTableDdl(parseTableName(table), 'mysql');
  if (options.result) ddl = ddl.replace('`result` mediumtext NULL', `\`result\` ${options.result} NULL`);
  if (options.keyCollation)
    ddl = ddl.replace('`key` varchar(255) NOT NULL', `\`key\` varchar(255) COLLATE ${options.keyCollation} NOT NULL`);
  await dataSource.query(ddl);
  // Its steps table, as ensureTable() or the migrations make it (the records table is left as made above).
  await new TypeOrmIdempotencyStore(dataSource, { tableName: table }).ensureTable();
  return table;
}

async function columnOf(dataSource: DataSource, table: string, column: string) {
  const [row] = (await dataSource.query(
    'SELECT DATA_TYPE AS type, COLLATION_NAME AS collation FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?',
    [table, column],
  )) as Array<{ type: string; collation: string | null }>;
  return row;
}

async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

/** A function run at most once per key through `store`, counting its runs, returning `size` bytes. */
function counted(store: TypeOrmIdempotencyStore, size: number, events: IdempotencyEvent[]) {
  const runs = { count: 0 };
  const fn = makeIdempotent(
    async (id: string) => {
      runs.count++;
      return { id, blob: 'x'.repeat(size) };
    },
    { store, key: (id) => id, scope: 'capacity', leaseTtl: 1_000, onEvent: (event) => events.push(event) },
  );
  return { fn, runs };
}

describe('records that the MariaDB table or server cannot hold', () => {
  let db: Awaited<ReturnType<typeof createMariaDataSource>>;
  let dataSource: DataSource;
  let packet: number;

  beforeAll(async () => {
    db = await createMariaDataSource({ poolSize: 4, synchronize: false });
    dataSource = db.dataSource;
    packet = Number((await dataSource.query('SELECT @@max_allowed_packet AS packet'))[0].packet);
  });
  afterAll(async () => {
    await db.destroy();
  });

  it('IdempotencyRecordEntity synchronizes to a MEDIUMTEXT result and binary-collated text columns, and a 100 KB result replays', async () => {
    const synced = await createMariaDataSource({
      entities: [IdempotencyRecordEntity, IdempotencyStepEntity],
      synchronize: true,
      poolSize: 3,
    });
    try {
      const table = 'idempotency_records';
      expect(await columnOf(synced.dataSource, table, 'result')).toMatchObject({ type: 'mediumtext', collation: 'utf8mb4_bin' });
      for (const column of ['key', 'status', 'lease_token', 'fingerprint']) {
        expect((await columnOf(synced.dataSource, table, column)).collation).toBe('utf8mb4_bin');
      }
      const store = new TypeOrmIdempotencyStore(synced.dataSource, { entity: IdempotencyRecordEntity });
      await store.verify();
      const events: IdempotencyEvent[] = [];
      const { fn, runs } = counted(store, KB100, events);
      const first = await fn('order-1');
      const second = await fn('order-1');
      expect(second).toEqual(first);
      expect(runs.count).toBe(1);
      expect(events.map((event) => event.type)).not.toContain('store_error');

      // A second schema sync finds nothing to change (TypeORM drops and re-adds a column whose type changed).
      const pending = await synced.dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((query) => query.query)).toEqual([]);
      expect(await fn('order-1')).toEqual(first);
    } finally {
      await synced.destroy();
    }
  });

  it('verify() refuses a TEXT result column (a table synchronized from the 0.4 entity) with the ALTER TABLE that fixes it', async () => {
    const table = await createTable(dataSource, { result: 'text' });
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const error = (await rejectionOf(store.verify())) as IdempotencyConfigurationError;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect(error.message).toMatch(/result column .* is TEXT, which holds 65535 bytes: less than maxResponseBytes \(1048576\)/);
    expect(error.hint).toContain(`ALTER TABLE \`${table}\` MODIFY \`result\` MEDIUMTEXT`);
    // The statement of the hint is the fix.
    await dataSource.query(/ALTER TABLE .*? NULL/.exec(error.hint!)![0]);
    await expect(store.verify()).resolves.toBeUndefined();
  });

  it('verify() refuses a MEDIUMTEXT result column for a maxResultBytes over 16 MiB, naming LONGTEXT', async () => {
    const table = await createTable(dataSource);
    const limit = 17 * 1024 * 1024;
    const error = (await rejectionOf(
      new TypeOrmIdempotencyStore(dataSource, { tableName: table, maxResultBytes: limit }).verify(),
    )) as IdempotencyConfigurationError;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect(error.hint).toContain('MODIFY `result` LONGTEXT');
  });

  it("the application's boot refuses a table too small for the module's maxResponseBytes, without maxResultBytes on the store", async () => {
    const table = await createTable(dataSource);
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    @Module({ imports: [IdempotencyModule.forRoot({ store, maxResponseBytes: 17 * 1024 * 1024, logger: false })] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false }).catch(
      (error: unknown) => error,
    );
    const error = app instanceof Error ? app : await rejectionOf((app as { init(): Promise<unknown> }).init());
    await (app as { close?(): Promise<void> }).close?.();
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as IdempotencyConfigurationError).hint).toMatch(/LONGTEXT|max_allowed_packet/);
  });

  it('verify() refuses a max_allowed_packet too small for maxResultBytes, naming the server setting', async () => {
    const table = await createTable(dataSource, { result: 'longtext' });
    // A result of half the packet can take a whole packet once its quotes are escaped.
    const limit = Math.floor(packet / 2);
    const error = (await rejectionOf(
      new TypeOrmIdempotencyStore(dataSource, { tableName: table, maxResultBytes: limit }).verify(),
    )) as IdempotencyConfigurationError;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect(error.message).toContain(`max_allowed_packet (${packet} bytes) is too small for maxResponseBytes (${limit})`);
    expect(error.hint).toMatch(/SET GLOBAL max_allowed_packet = \d+/);
    await expect(
      new TypeOrmIdempotencyStore(dataSource, { tableName: table, maxResultBytes: Math.floor(packet / 2) - 8192 }).verify(),
    ).resolves.toBeUndefined();
  });

  it('verify() refuses a records key column whose collation ignores case', async () => {
    const table = await createTable(dataSource, { keyCollation: 'utf8mb4_general_ci' });
    const error = (await rejectionOf(
      new TypeOrmIdempotencyStore(dataSource, { tableName: table }).verify(),
    )) as IdempotencyConfigurationError;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect(error.message).toContain('utf8mb4_general_ci, which ignores case');
    await dataSource.query(/ALTER TABLE .*/.exec(error.hint!)![0].replace(/\.$/, ''));
    await expect(new TypeOrmIdempotencyStore(dataSource, { tableName: table }).verify()).resolves.toBeUndefined();
  });

  it('a result over the column is stored as not storable, reported once, and a retry does not run the handler again', async () => {
    const table = await createTable(dataSource, { result: 'text' });
    // No verify(): the table is found too small only when a result does not fit.
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const storeEvents: IdempotencyEvent[] = [];
    store.addEventListener((event) => storeEvents.push(event));
    const events: IdempotencyEvent[] = [];
    const { fn, runs } = counted(store, KB100, events);
    const id = randomUUID();
    const first = await fn(id);
    expect(first.blob).toHaveLength(KB100);
    const retry = await rejectionOf(fn(id));
    expect(retry).toBeInstanceOf(IdempotencyNotReplayableError);
    expect(runs.count).toBe(1);
    expect(events.map((event) => event.type)).toEqual(['claimed', 'completed', 'replayed']);
    expect(storeEvents).toEqual([
      expect.objectContaining({ type: 'response_not_storable', reason: expect.stringContaining('(text) holds (65535 bytes)') }),
    ]);
    // Small results still go to the same table.
    const small = makeIdempotent(async () => 'ok', { store, key: () => 'small', scope: 'capacity' });
    expect(await small()).toBe('ok');
  });

  it('a result over max_allowed_packet is never sent: the key completes as not storable and every pooled connection still works', async () => {
    const table = await createTable(dataSource, { result: 'longtext' });
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const storeEvents: IdempotencyEvent[] = [];
    store.addEventListener((event) => storeEvents.push(event));
    const key = 'k' + randomUUID().replace(/-/g, '');
    const claim = await store.claim(key, { token: 't1', leaseTtl: 30_000 });
    expect(claim.claimed).toBe(true);
    // Under the packet in bytes, over it once mysql2 escapes every quote.
    const result = JSON.stringify('"'.repeat(Math.floor(packet / 4) + 1024)); // each quote is \" in JSON
    expect(Buffer.byteLength(result)).toBeLessThan(packet);
    expect(await store.complete(key, 't1', { result, ttl: 60_000 })).toBe(true);
    const record = await store.get(key);
    expect(record?.status).toBe('completed');
    const outcome = deserializeOutcome((record as { result: string }).result);
    expect(outcome).toMatchObject({ kind: 'unstorable', reason: expect.stringContaining('max_allowed_packet') });
    expect(storeEvents.map((event) => event.type)).toEqual(['response_not_storable']);
    // Every connection of the pool answers (a refused packet would have closed one).
    const answers = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map(() => store.get('k' + randomUUID().replace(/-/g, ''))));
    expect(answers).toEqual(new Array(8).fill(undefined));
  });

  it('runTransactional commits the work when its result is over the column, with the record not storable', async () => {
    const table = await createTable(dataSource, { result: 'text' });
    await dataSource.query('CREATE TABLE IF NOT EXISTS capacity_effects (id varchar(64) PRIMARY KEY)');
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const storeEvents: IdempotencyEvent[] = [];
    store.addEventListener((event) => storeEvents.push(event));
    const key = 'k' + randomUUID().replace(/-/g, '');
    const outcome = await store.runTransactional({ key, ttl: 60_000 }, async () => {
      const { getIdempotentEntityManager } = await import('../../../lib/typeorm/index.js');
      await getIdempotentEntityManager().query('INSERT INTO capacity_effects (id) VALUES (?)', [key]);
      return { value: 'done', result: JSON.stringify({ kind: 'value', value: { t: 'j', v: 'x'.repeat(KB100) } }) };
    });
    expect(outcome).toEqual({ kind: 'executed', value: 'done' });
    expect(await dataSource.query('SELECT id FROM capacity_effects WHERE id = ?', [key])).toHaveLength(1);
    const record = await store.get(key);
    expect(deserializeOutcome((record as { result: string }).result)).toMatchObject({ kind: 'unstorable' });
    expect(storeEvents.map((event) => event.type)).toEqual(['response_not_storable']);
    expect(store.transactionRetries).toBe(0);
  });

  it('a completed record whose result was lost (a schema sync re-created the column) replays as not storable, never runs again', async () => {
    const table = await createTable(dataSource);
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const events: IdempotencyEvent[] = [];
    const { fn, runs } = counted(store, 10, events);
    await fn('lost');
    // What TypeORM's DROP COLUMN + ADD COLUMN leaves: completed rows with a NULL result.
    await dataSource.query(`UPDATE \`${table}\` SET \`result\` = NULL`);
    expect(await rejectionOf(fn('lost'))).toBeInstanceOf(IdempotencyNotReplayableError);
    expect(runs.count).toBe(1);
    const replay = await store.runTransactional(
      { key: (await dataSource.query(`SELECT \`key\` FROM \`${table}\``))[0].key, ttl: 60_000 },
      () => {
        throw new Error('the work must not run');
      },
    );
    expect(replay.kind).toBe('replay');
    expect(deserializeOutcome((replay as { result: string }).result)).toMatchObject({
      kind: 'unstorable',
      reason: expect.stringContaining('lost'),
    });
  });
});
