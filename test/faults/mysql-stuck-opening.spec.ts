/**
 * TypeOrmIdempotencyStore on MariaDB (mysql2 pool): a connection the pool opened while the
 * path dropped every packet never gets the server's greeting, and mysql2 waits for it for
 * `connectTimeout` (10 s by default), holding one of the pool's slots. The store frees such
 * slots when a checkout runs past `statementTimeout` (and before a checkout that finds every
 * slot taken), so the first request after the heal is served instead of queueing behind the
 * stuck handshake (issue 42: up to 6 s to recover on MariaDB). One slot, so the test is
 * deterministic: synchronised on the proxy's counters and the store's own answers.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { HarnessMariaDatabase } from '../reliability/harness/mariadb.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { mariadbConnection } from '../support/mariadb.js';

const STATEMENT_TIMEOUT_MS = 1_500;

describe('TypeOrmIdempotencyStore on MariaDB: a connection stuck opening on a dead path', () => {
  const db = new HarnessMariaDatabase(`faults_opening_${process.pid}_${randomBytes(4).toString('hex')}`);
  let proxy: FaultProxy;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    await db.create();
    proxy = await startFaultProxy({ host: mariadbConnection.host, port: mariadbConnection.port });
    dataSource = new DataSource({ ...mariadbConnection, ...proxy.address, database: db.database, poolSize: 1, logging: false });
    await dataSource.initialize();
    store = new TypeOrmIdempotencyStore(dataSource, { statementTimeout: STATEMENT_TIMEOUT_MS });
  }, 30_000);

  afterAll(async () => {
    await Promise.race([dataSource?.destroy().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
    await proxy?.stop();
    await db.drop();
  }, 30_000);

  it('does not hold its pool slot: the first request after the heal is served', async () => {
    await expect(store.get('warm-up')).resolves.toBeUndefined();
    proxy.blackhole();
    // The pooled connection is caught: its statement runs past the deadline and is destroyed.
    await expect(store.get('caught-open')).rejects.toMatchObject({ name: 'StatementDeadlineError' });
    const caughtBefore = proxy.stats.blackholed;
    // The next checkout opens a connection on the dead path: its handshake never ends.
    await expect(store.get('caught-opening')).rejects.toMatchObject({ name: 'StatementDeadlineError' });
    expect(proxy.stats.blackholed).toBeGreaterThan(caughtBefore);
    await proxy.heal();
    const acceptedBefore = proxy.stats.accepted;
    // Before: the slot stayed with the stuck handshake for connectTimeout, and this waited
    // in mysql2's queue until its own deadline.
    await expect(store.get('after-heal')).resolves.toBeUndefined();
    expect(proxy.stats.accepted).toBeGreaterThan(acceptedBefore);
  }, 30_000);
});
