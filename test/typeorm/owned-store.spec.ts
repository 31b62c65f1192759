import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { Controller, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { createConnection, type Connection } from 'mysql2/promise';
import { Client } from 'pg';
import request from 'supertest';
import { IdempotencyConfigurationError, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { createTypeOrmIdempotencyStore, type OwnedTypeOrmIdempotencyStoreOptions } from '../../lib/typeorm/index.js';
import { mariadbConnection } from '../support/mariadb.js';
import { freePort } from '../support/redis-servers.js';
import { waitFor } from '../messages/support.js';

/**
 * Issue 43: the owned path of the TypeORM store. `createTypeOrmIdempotencyStore({ url })`
 * makes its DataSource, the module opens it at boot (creating the tables when asked),
 * and closing the module destroys it: every connection the library opened is gone, and
 * Jest exits without an open handle. A database that is not there stops `app.init()`
 * with an error naming the server, never the password.
 */
const run = `${process.pid}_${Date.now().toString(36)}`;
const PG_BASE = `postgres://${process.env.PGUSER ?? 'postgres'}@${process.env.PGHOST ?? '127.0.0.1'}:${process.env.PGPORT ?? 5432}`;
const PG_URL = `${PG_BASE}/${process.env.PGDATABASE ?? 'test'}`;
const pgSchema = `owned_typeorm_${run}`;
const mariaDatabase = `owned_typeorm_${run}`;
const { host, port, username, password } = mariadbConnection;
const MARIA_URL = `mariadb://${encodeURIComponent(username)}${password ? `:${encodeURIComponent(password)}` : ''}@${host}:${port}/${mariaDatabase}`;

let runs = 0;
@Controller('payments')
class PaymentsController {
  @Post()
  @Idempotent()
  create() {
    return { id: `pay_${++runs}` };
  }
}

function appWith(options: OwnedTypeOrmIdempotencyStoreOptions): Promise<INestApplication> {
  @Module({
    imports: [IdempotencyModule.forRoot({ isGlobal: true, logger: false, store: createTypeOrmIdempotencyStore(options) })],
    controllers: [PaymentsController],
  })
  class AppModule {}
  return NestFactory.create(AppModule, { logger: false });
}

async function expectReplay(app: INestApplication): Promise<void> {
  const key = randomUUID();
  const first = await request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).expect(201);
  const retry = await request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).expect(201);
  expect(retry.body).toEqual(first.body);
  expect(retry.headers['idempotent-replayed']).toBe('true');
}

describe('createTypeOrmIdempotencyStore: a store that owns its DataSource', () => {
  let pg: Client;
  let maria: Connection;

  beforeAll(async () => {
    pg = new Client({ connectionString: PG_URL });
    await pg.connect();
    await pg.query(`CREATE SCHEMA ${pgSchema}`);
    maria = await createConnection({ host, port, user: username, password });
    await maria.query(`CREATE DATABASE \`${mariaDatabase}\``);
  });

  afterAll(async () => {
    await pg?.query(`DROP SCHEMA IF EXISTS ${pgSchema} CASCADE`);
    await pg?.end();
    await maria?.query(`DROP DATABASE IF EXISTS \`${mariaDatabase}\``);
    await maria?.end();
  });

  const pgConnections = async (applicationName: string) =>
    Number((await pg.query('SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [applicationName])).rows[0].n);
  const mariaConnections = async () => {
    const [rows] = (await maria.query('SHOW FULL PROCESSLIST')) as unknown as [Array<{ db: string | null }>];
    return rows.filter((row) => row.db === mariaDatabase).length;
  };

  it('PostgreSQL: creates its tables at boot, replays a duplicate, and app.close() ends every connection it opened', async () => {
    const applicationName = `owned-${run}`;
    const app = await appWith({
      url: `${PG_URL}?options=-c%20search_path%3D${pgSchema}`,
      applicationName,
      ensureTable: true,
    });
    await app.init();
    const { rows } = await pg.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [pgSchema]);
    expect(rows.map((row: { table_name: string }) => row.table_name)).toContain('idempotency_records');
    await expectReplay(app);
    expect(await pgConnections(applicationName)).toBeGreaterThan(0);
    await app.close();
    await waitFor('the owned connections to end', async () => (await pgConnections(applicationName)) === 0, 5_000);
  });

  it('MariaDB: the same, and a second app on the same tables boots without ensureTable (verify finds them)', async () => {
    const first = await appWith({ url: MARIA_URL, ensureTable: true });
    await first.init();
    await expectReplay(first);
    expect(await mariaConnections()).toBeGreaterThan(0);
    await first.close();
    await waitFor('the owned connections to end', async () => (await mariaConnections()) === 0, 5_000);

    const second = await appWith({ url: MARIA_URL });
    await second.init();
    await expectReplay(second);
    await second.close();
    await waitFor('the owned connections to end', async () => (await mariaConnections()) === 0, 5_000);
  });

  it('refuses to boot on a database without the tables when ensureTable is off, names the fix, and closes its pool', async () => {
    const applicationName = `owned-missing-${run}`;
    const app = await appWith({ url: `${PG_URL}?options=-c%20search_path%3D${pgSchema}`, applicationName, tableName: 'no_such_records' });
    try {
      const error = await app.init().then(
        () => undefined,
        (failure: unknown) => failure,
      );
      expect(error).toBeInstanceOf(IdempotencyConfigurationError);
      expect((error as Error).message).toContain('ensureTable: true');
    } finally {
      await app.close();
    }
    await waitFor('the owned connections to end', async () => (await pgConnections(applicationName)) === 0, 5_000);
  });

  it('a database that is not there stops app.init() after readyTimeout with an error naming the server, never the password', async () => {
    const secret = `s3cret-${randomUUID()}`;
    const deadPort = await freePort();
    const app = await appWith({ url: `postgres://payments:${secret}@127.0.0.1:${deadPort}/payments`, readyTimeout: 600 });
    const started = Date.now();
    let error: unknown;
    try {
      error = await app.init().then(
        () => undefined,
        (failure: unknown) => failure,
      );
    } finally {
      await app.close();
    }
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    const message = (error as Error).message;
    expect(message).toContain(`postgres at 127.0.0.1:${deadPort}/payments`);
    expect(message).toContain('raise readyTimeout');
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(inspect(error, { depth: 10 })).not.toContain(secret);
  });

  it('MariaDB with a wrong password: the boot stops at once, naming the server, not the password', async () => {
    const secret = `wrong-${randomUUID()}`;
    const app = await appWith({
      url: `mysql://${encodeURIComponent(username)}:${secret}@${host}:${port}/${mariaDatabase}`,
    });
    const started = Date.now();
    let error: unknown;
    try {
      error = await app.init().then(
        () => undefined,
        (failure: unknown) => failure,
      );
    } finally {
      await app.close();
    }
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toContain(`mysql at ${host}:${port}/${mariaDatabase}`);
    expect((error as Error).message).toContain('Check the user, password and database name');
    expect(inspect(error, { depth: 10 })).not.toContain(secret);
    // Waiting does not change a refusal: the boot stops at once, not after readyTimeout (10 s).
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('PostgreSQL: a database that does not exist stops the boot at once, naming it', async () => {
    const app = await appWith({ url: `${PG_BASE}/no_such_database_${run}` });
    const started = Date.now();
    let error: unknown;
    try {
      error = await app.init().then(
        () => undefined,
        (failure: unknown) => failure,
      );
    } finally {
      await app.close();
    }
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toContain(`/no_such_database_${run}`);
    expect((error as Error).message).toContain('Check the user, password and database name');
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('refuses a URL it cannot place, without repeating it', () => {
    expect(() => createTypeOrmIdempotencyStore({ url: 'redis://user:pw@host:6379' })).toThrow(/postgres:\/\/, mysql:\/\/ or mariadb:\/\//);
    expect(() => createTypeOrmIdempotencyStore({ url: 'not a url with hunter2' })).toThrow(IdempotencyConfigurationError);
    expect(() => createTypeOrmIdempotencyStore({ url: 'not a url with hunter2' })).not.toThrow(/hunter2/);
  });

  it('refuses the entity option (its DataSource has no entities of yours), pointing at tableName', () => {
    const options = { url: PG_URL, entity: class Records {} } as OwnedTypeOrmIdempotencyStoreOptions;
    expect(() => createTypeOrmIdempotencyStore(options)).toThrow(/tableName/);
  });

  it('close() can be called again, and before the boot', async () => {
    const store = createTypeOrmIdempotencyStore({ url: PG_URL });
    await store.close();
    await store.close();
    await expect(store.verify()).rejects.toThrow(IdempotencyConfigurationError);
    expect(store.dataSource.isInitialized).toBe(false);
  });
});
