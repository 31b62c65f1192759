import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { DataSource, EntityManager } from 'typeorm';
import { storageKeyOf } from '../../../lib/core/hash.js';
import { TypeOrmIdempotencyStore, executeIdempotentTransaction } from '../../../lib/typeorm/index.js';
import { Account, RefundRecord, refundEntities } from '../refund.entities.js';
import { waitUntil } from '../support.js';
import { createMariaDataSource, waitForLockWait } from './support.js';

const repoRoot = path.resolve(__dirname, '../../..');

describe('a worker killed (SIGKILL) inside runIdempotentTransaction before commit, on MariaDB', () => {
  let db: Awaited<ReturnType<typeof createMariaDataSource>>;
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;
  const children = new Set<ChildProcess>();

  beforeAll(async () => {
    db = await createMariaDataSource({ entities: refundEntities, poolSize: 6 });
    dataSource = db.dataSource;
    store = new TypeOrmIdempotencyStore(dataSource);
    await store.ensureTable();
  });
  afterAll(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await db.destroy();
  });

  /** Starts the child worker (test/typeorm/fixtures/refund-child.ts) and resolves once it has written its rows (uncommitted). */
  async function startChild(messageId: string, accountId: number) {
    const child = spawn(
      process.execPath,
      ['--require', path.join(repoRoot, 'test/support/ts-require.js'), path.join(repoRoot, 'test/typeorm/fixtures/refund-child.ts')],
      {
        cwd: repoRoot,
        env: {
          ...process.env,
          CHILD_DB: 'mariadb',
          CHILD_SCHEMA: db.database,
          CHILD_MESSAGE_ID: messageId,
          CHILD_ACCOUNT_ID: String(accountId),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    children.add(child);
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const connectionId = await new Promise<number>((resolve, reject) => {
      let stdout = '';
      child.stdout!.on('data', (chunk) => {
        stdout += chunk;
        const match = /CONNECTION (\d+)\nWROTE\n/.exec(stdout);
        if (match) resolve(Number(match[1]));
      });
      child.once('exit', (code) => reject(new Error(`child exited (${code}) before writing: ${stderr}`)));
    });
    return {
      async kill() {
        child.kill('SIGKILL');
        await exited;
        // The server rolls the transaction back once it sees the socket close.
        await waitUntil(
          async () => (await dataSource.query('SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = ?', [connectionId])).length === 0,
          {
            what: `the child's connection ${connectionId} to go`,
          },
        );
      },
    };
  }

  const balanceOf = async (accountId: number) => (await dataSource.getRepository(Account).findOneByOrFail({ id: accountId })).balance;

  const refund = (messageId: string, accountId: number) => async (manager: EntityManager) => {
    await manager.insert(RefundRecord, { idemKey: messageId, accountId, amount: 40 });
    await manager.decrement(Account, { id: accountId }, 'balance', 40);
    return { refunded: 40, by: process.pid };
  };

  it('leaves no refund row, no balance change and no record; the retry applies the refund exactly once', async () => {
    const accountId = (await dataSource.getRepository(Account).save({ balance: 100 })).id;
    const messageId = randomUUID();
    const child = await startChild(messageId, accountId);
    await child.kill();

    expect(await balanceOf(accountId)).toBe(100);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(0);
    expect(await dataSource.query(`SELECT 1 FROM ${store.tableName} WHERE \`key\` = ?`, [storageKeyOf('refunds', messageId)])).toEqual([]);

    const retry = await executeIdempotentTransaction(dataSource, { key: messageId, scope: 'refunds' }, refund(messageId, accountId));
    expect(retry).toEqual({ value: { refunded: 40, by: process.pid }, replayed: false });
    const again = await executeIdempotentTransaction(dataSource, { key: messageId, scope: 'refunds' }, refund(messageId, accountId));
    expect(again.replayed).toBe(true);
    expect(await balanceOf(accountId)).toBe(60);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
  });

  it('unblocks a duplicate that was waiting on the record row lock, which then applies the refund itself', async () => {
    const accountId = (await dataSource.getRepository(Account).save({ balance: 100 })).id;
    const messageId = randomUUID();
    const child = await startChild(messageId, accountId);
    const duplicate = executeIdempotentTransaction(dataSource, { key: messageId, scope: 'refunds' }, refund(messageId, accountId));
    await waitForLockWait(dataSource, `INSERT INTO ${store.tableName}%`, 'the duplicate to wait behind the child');
    await child.kill();
    expect(await duplicate).toEqual({ value: { refunded: 40, by: process.pid }, replayed: false });
    expect(await balanceOf(accountId)).toBe(60);
    expect(await dataSource.getRepository(RefundRecord).countBy({ idemKey: messageId })).toBe(1);
  });
});
