import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Redis from 'ioredis';

/**
 * The inventory example of docs/tokens-and-locks.md across two real processes sharing
 * one Redis: 10 items in stock, 100 buyers (50 per process), each doing
 * read-check-write under withLock(RedisLockProvider).
 */
const WORKER = join(__dirname, 'fixtures', 'inventory-worker.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');

interface WorkerReport {
  sold: number;
  refused: number;
  lowestWritten: number;
  errors: string[];
  fatal?: string;
}

const children = new Set<ChildProcess>();
let redis: Redis;
beforeAll(() => {
  redis = new Redis({ host: '127.0.0.1', port: 6379 });
});
afterAll(() => {
  for (const child of children) child.kill('SIGKILL');
  redis.disconnect();
});

async function runShop(useLock: boolean): Promise<{ reports: WorkerReport[]; finalStock: number }> {
  const stockKey = `test:inventory:${randomUUID()}`;
  await redis.set(stockKey, '10', 'PX', 120_000);
  const workers = [0, 1].map(() => {
    const child = fork(WORKER, [], { execArgv: ['--require', TS_REQUIRE], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.add(child);
    child.once('exit', () => children.delete(child));
    return child;
  });
  const nextMessage = (child: ChildProcess) =>
    new Promise<WorkerReport & { ready?: boolean }>((resolve, reject) => {
      child.once('message', (message) => resolve(message as WorkerReport & { ready?: boolean }));
      child.once('exit', (code) => reject(new Error(`inventory worker exited with ${code} before answering`)));
    });

  const ready = workers.map(nextMessage);
  // One lock namespace for both processes: that is what makes the lock shared.
  const lockPrefix = `test:lock:${randomUUID()}:`;
  for (const child of workers) child.send({ redisPort: 6379, stockKey, lockPrefix, buyers: 50, useLock });
  for (const message of await Promise.all(ready)) expect(message).toEqual({ ready: true });
  const done = workers.map(nextMessage);
  for (const child of workers) child.send({ go: true });
  const reports = await Promise.all(done);
  for (const report of reports) expect(report.fatal).toBeUndefined();
  const finalStock = Number(await redis.get(stockKey));
  await redis.del(stockKey);
  return { reports, finalStock };
}

describe('inventory across two processes', () => {
  it('with withLock: sells exactly the 10 items in stock, never below zero', async () => {
    const { reports, finalStock } = await runShop(true);
    for (const report of reports) expect(report.errors).toEqual([]);
    expect(reports.reduce((sum, r) => sum + r.sold, 0)).toBe(10);
    expect(reports.reduce((sum, r) => sum + r.refused, 0)).toBe(90);
    expect(finalStock).toBe(0);
    for (const report of reports) expect(report.lowestWritten === Number.POSITIVE_INFINITY || report.lowestWritten >= 0).toBe(true);
  }, 60_000);

  it('without the lock the same workload oversells (the test can tell)', async () => {
    const { reports } = await runShop(false);
    expect(reports.reduce((sum, r) => sum + r.sold, 0)).toBeGreaterThan(10);
  }, 60_000);
});
