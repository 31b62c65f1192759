import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { IdempotencyConfigurationError, isIdempotencyError } from '../../lib/core/errors.js';
import type { IdempotencyEvent } from '../../lib/core/events.js';
import {
  TypeOrmIdempotencyStore,
  createIdempotencyRecordEntity,
  parseTableName,
  recordsTableDdl,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { createPgDataSource, createSqljsDataSource, pgConnection, uniqueName, waitUntil } from './support.js';

const key = () => 'k' + randomUUID().replace(/-/g, '');

/** Every way a request reaches the table; each must call a missing table a configuration error. */
function primitives(store: TypeOrmIdempotencyStore): Array<[string, () => Promise<unknown>]> {
  return [
    ['claim', () => store.claim(key(), { token: 't', leaseTtl: 10_000 })],
    ['complete', () => store.complete(key(), 't', { result: 'r', ttl: 10_000 })],
    ['release', () => store.release(key(), 't')],
    ['renew', () => store.renew(key(), 't', 10_000)],
    ['get', () => store.get(key())],
    ['delete', () => store.delete(key())],
    ['purgeExpired', () => store.purgeExpired()],
    ['runTransactional', () => store.runTransactional({ key: key(), ttl: 10_000 }, async () => ({ value: 1, result: '1' }))],
  ];
}

async function expectMissingTable(operation: Promise<unknown>, table: string): Promise<IdempotencyConfigurationError> {
  const error = await operation.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(IdempotencyConfigurationError);
  const problem = error as IdempotencyConfigurationError;
  expect(problem.message).toContain(`${table} does not exist`);
  expect(problem.hint).toMatch(/CreateIdempotencyTables1700000000000/);
  expect(problem.hint).toMatch(/ensureTable\(\)/);
  expect(problem.hint).toMatch(/idempotencyEntities/);
  expect(problem.cause).toBeDefined();
  return problem;
}

/** Collects process warnings, which the store must no longer emit. */
function recordProcessWarnings() {
  const warnings: Error[] = [];
  const listener = (warning: Error) => void warnings.push(warning);
  process.on('warning', listener);
  return { warnings, stop: () => void process.off('warning', listener) };
}

/** Records what reaches Nest's Logger, with the context of the logger instance. */
function recordNestWarnings() {
  const lines: Array<{ context: string | undefined; message: string }> = [];
  const spy = jest.spyOn(Logger.prototype, 'warn').mockImplementation(function (this: Logger, message: unknown) {
    lines.push({ context: (this as unknown as { context?: string }).context, message: String(message) });
  });
  return { lines, stop: () => spy.mockRestore() };
}

describe('TypeOrmIdempotencyStore setup checks on PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createPgDataSource>>;
  let dataSource: DataSource;

  beforeAll(async () => {
    db = await createPgDataSource({ poolSize: 6, synchronize: false });
    dataSource = db.dataSource;
  });
  afterAll(async () => {
    await db.destroy();
  });

  async function createTableOutsideTheStore(tableName: string) {
    for (const statement of recordsTableDdl(parseTableName(tableName, db.schema))) await dataSource.query(statement);
    // Its steps table, as ensureTable() or the migrations make it beside the records table.
    await new TypeOrmIdempotencyStore(dataSource, { tableName }).ensureTable();
  }

  it('verify() refuses a missing records table, naming it and the three ways to create it; passes once it exists', async () => {
    const tableName = uniqueName('absent');
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName });
    const problem = await expectMissingTable(store.verify(), `"${db.schema}"."${tableName}"`);
    expect(problem.hint).toContain(`createIdempotencyTablesMigration({ tableName: '${db.schema}.${tableName}' })`);
    expect((problem.cause as { driverError?: { code?: string } }).driverError?.code).toBe('42P01');
    await store.ensureTable();
    await expect(store.verify()).resolves.toBeUndefined();
  });

  it('verify() refuses a table of that name that lacks the store columns', async () => {
    const tableName = uniqueName('foreign');
    await dataSource.query(`CREATE TABLE "${db.schema}"."${tableName}" ("key" varchar PRIMARY KEY, "value" text)`);
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName });
    await expect(store.verify()).rejects.toThrow(IdempotencyConfigurationError);
    await expect(store.verify()).rejects.toThrow(/lacks a column the store needs/);
  });

  it('verify() refuses an entity option the DataSource does not know', async () => {
    const Entity = createIdempotencyRecordEntity(uniqueName('unregistered'));
    const store = new TypeOrmIdempotencyStore(dataSource, { entity: Entity });
    await expect(store.verify()).rejects.toThrow(IdempotencyConfigurationError);
    await expect(store.verify()).rejects.toThrow(/is not registered in its DataSource/);
  });

  it('verify() rethrows an unreachable database as it is: an outage, not a configuration error', async () => {
    // A TCP proxy in front of PostgreSQL, closed once the DataSource is up: the database
    // then refuses connections, as it does while down.
    const sockets = new Set<net.Socket>();
    const proxy = net.createServer((client) => {
      const upstream = net.connect(pgConnection.port, pgConnection.host);
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('error', () => socket.destroy());
        socket.on('close', () => sockets.delete(socket));
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const port = (proxy.address() as net.AddressInfo).port;
    const proxied = new DataSource({ ...pgConnection, host: '127.0.0.1', port, poolSize: 1, logging: false });
    await proxied.initialize();
    try {
      const store = new TypeOrmIdempotencyStore(proxied, { tableName: uniqueName('unreachable') });
      const closed = new Promise<void>((resolve) => proxy.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
      const error = await store.verify().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(Error);
      expect(isIdempotencyError(error)).toBe(false);
    } finally {
      await proxied.destroy().catch(() => undefined);
    }
  });

  it('refuses a DataSource whose driver it does not support when constructed, not at every request', () => {
    const cockroach = new DataSource({ type: 'cockroachdb', host: '127.0.0.1', username: 'x', database: 'y', timeTravelQueries: false });
    expect(() => new TypeOrmIdempotencyStore(cockroach)).toThrow(IdempotencyConfigurationError);
    expect(() => new TypeOrmIdempotencyStore(cockroach)).toThrow(/does not support the 'cockroachdb' driver/);
  });

  it('refuses an invalid table name when constructed', () => {
    expect(() => new TypeOrmIdempotencyStore(dataSource, { tableName: 'bad name' })).toThrow(IdempotencyConfigurationError);
  });

  it.each([true, false])(
    'answers every primitive on a missing table with IdempotencyConfigurationError, never a driver error (preparedStatements: %s)',
    async (preparedStatements) => {
      const tableName = uniqueName('missing');
      const store = new TypeOrmIdempotencyStore(dataSource, { tableName, preparedStatements });
      for (const [name, operation] of primitives(store)) {
        const problem = await expectMissingTable(operation(), `"${db.schema}"."${tableName}"`).catch((error: unknown) => {
          throw new Error(`${name}: ${String(error)}`);
        });
        expect(problem.status).toBe(500);
      }
    },
  );

  it('answers runIdempotentTransaction on a missing table with IdempotencyConfigurationError', async () => {
    const tableName = uniqueName('missing_tx');
    let ran = false;
    await expectMissingTable(
      runIdempotentTransaction(dataSource, { key: randomUUID(), tableName }, async () => {
        ran = true;
        return 1;
      }),
      `"${db.schema}"."${tableName}"`,
    );
    expect(ran).toBe(false);
  });

  describe('the purge job', () => {
    const stores: TypeOrmIdempotencyStore[] = [];
    let setIntervalSpy: jest.SpyInstance;
    let processWarnings: ReturnType<typeof recordProcessWarnings>;
    let nestWarnings: ReturnType<typeof recordNestWarnings>;

    beforeEach(() => {
      setIntervalSpy = jest.spyOn(global, 'setInterval');
      processWarnings = recordProcessWarnings();
      nestWarnings = recordNestWarnings();
    });
    afterEach(async () => {
      for (const store of stores.splice(0)) await store.close();
      setIntervalSpy.mockRestore();
      processWarnings.stop();
      nestWarnings.stop();
    });

    /** Purge timers the store started: the tests give each store an interval no other code uses. */
    const timersEvery = (ms: number) => setIntervalSpy.mock.calls.filter((call) => call[1] === ms).length;

    function purgingStore(options: ConstructorParameters<typeof TypeOrmIdempotencyStore>[1]) {
      const store = new TypeOrmIdempotencyStore(dataSource, options);
      stores.push(store);
      return store;
    }

    it('does not start before the table answers: verify() starts it once the table exists', async () => {
      const tableName = uniqueName('late_table');
      const purges: unknown[] = [];
      const failures: unknown[] = [];
      const store = purgingStore({ tableName, purgeInterval: 11, onPurge: (r) => purges.push(r), onPurgeError: (e) => failures.push(e) });
      await expect(store.verify()).rejects.toThrow(IdempotencyConfigurationError);
      // The application would stop here; nothing may be scheduled against the absent table.
      expect(timersEvery(11)).toBe(0);
      await createTableOutsideTheStore(tableName);
      await store.verify();
      expect(timersEvery(11)).toBe(1);
      await waitUntil(() => purges.length > 0, { what: 'the first scheduled purge' });
      await store.verify(); // a second boot check starts no second timer
      expect(timersEvery(11)).toBe(1);
      expect(failures).toEqual([]);
      expect(processWarnings.warnings).toEqual([]);
    });

    it('starts on the first successful statement when verify() is never called', async () => {
      const tableName = uniqueName('no_verify');
      await createTableOutsideTheStore(tableName);
      const purges: Array<{ deleted: number }> = [];
      const store = purgingStore({ tableName, purgeInterval: 12, onPurge: (r) => purges.push(r) });
      expect(timersEvery(12)).toBe(0);
      const k = key();
      await store.claim(k, { token: 't', leaseTtl: 1 });
      expect(timersEvery(12)).toBe(1);
      await waitUntil(() => purges.some((r) => r.deleted > 0), { what: 'a scheduled purge to delete the dead lease' });
    });

    it('reports a failed purge to event listeners as store_error with an empty key, and logs it only while nobody listens', async () => {
      const tableName = uniqueName('dropped');
      const store = purgingStore({ tableName, purgeInterval: 13 });
      await store.ensureTable();
      const events: IdempotencyEvent[] = [];
      const unsubscribe = store.addEventListener((event) => void events.push(event));
      await dataSource.query(`DROP TABLE "${db.schema}"."${tableName}"`);
      await waitUntil(() => events.length > 0, { what: 'a store_error event' });
      expect(events[0]).toMatchObject({ type: 'store_error', key: '' });
      expect(events[0].reason).toMatch(/background purge of expired records/);
      expect(events[0].error).toBeInstanceOf(IdempotencyConfigurationError);
      expect(String((events[0].error as Error).message)).toContain(`"${db.schema}"."${tableName}" does not exist`);
      // Listened to: the module's listeners log it, the store does not print it twice.
      expect(nestWarnings.lines).toEqual([]);

      unsubscribe();
      await waitUntil(() => nestWarnings.lines.length > 0, { what: "a warning on Nest's Logger" });
      expect(nestWarnings.lines[0].context).toBe('Idempotency');
      expect(nestWarnings.lines[0].message).toMatch(/background purge of expired records .* failed.*does not exist/);
      expect(processWarnings.warnings).toEqual([]);
    });

    it('still hands failures to onPurgeError (and to listeners) instead of logging them', async () => {
      const tableName = uniqueName('dropped_cb');
      const failures: unknown[] = [];
      const store = purgingStore({ tableName, purgeInterval: 14, onPurgeError: (error) => failures.push(error) });
      await store.ensureTable();
      const events: IdempotencyEvent[] = [];
      store.addEventListener((event) => void events.push(event));
      store.addEventListener(() => {
        throw new Error('a broken listener');
      });
      await dataSource.query(`DROP TABLE "${db.schema}"."${tableName}"`);
      await waitUntil(() => failures.length > 1 && events.length > 1, { what: 'two reported purge failures' });
      expect(failures[0]).toBeInstanceOf(IdempotencyConfigurationError);
      expect(nestWarnings.lines).toEqual([]);
      expect(processWarnings.warnings).toEqual([]);
    });
  });
});

describe('TypeOrmIdempotencyStore setup checks on SQLite (sql.js)', () => {
  let dataSource: DataSource;

  beforeAll(async () => {
    dataSource = await createSqljsDataSource({ synchronize: false });
  });
  afterAll(async () => {
    await dataSource.destroy();
  });

  it('verify() refuses a missing records table, and passes once ensureTable() created it', async () => {
    const tableName = uniqueName('absent');
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName });
    await expectMissingTable(store.verify(), `"${tableName}"`);
    await store.ensureTable();
    await expect(store.verify()).resolves.toBeUndefined();
  });

  it('answers every primitive on a missing table with IdempotencyConfigurationError', async () => {
    const tableName = uniqueName('missing');
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName });
    for (const [name, operation] of primitives(store)) {
      await expectMissingTable(operation(), `"${tableName}"`).catch((error: unknown) => {
        throw new Error(`${name}: ${String(error)}`);
      });
    }
  });

  it('answers runIdempotentTransaction on a missing table with IdempotencyConfigurationError', async () => {
    const tableName = uniqueName('missing_tx');
    await expectMissingTable(
      runIdempotentTransaction(dataSource, { key: randomUUID(), tableName }, async () => 1),
      `"${tableName}"`,
    );
  });
});
