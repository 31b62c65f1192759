import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import {
  createMariadbFloorTable,
  createPostgresFloorTable,
  mariadbFloor,
  memoryFloor,
  postgresFloor,
  redisFloor,
  type FloorBackend,
  type FloorMysqlPool,
  type FloorPgPool,
} from '../../bench/floors.js';

// The floors of `npm run bench` keep the contract they stand for, on the real servers: a
// new key is taken once, a duplicate sees the claimer's fingerprint while in flight and
// the stored answer after completion. A floor that skipped a round trip would fail here.
const run = randomBytes(4).toString('hex');

async function contract(floor: FloorBackend): Promise<void> {
  const key = `k-${randomBytes(6).toString('hex')}`;
  await expect(floor.claim(key, 'fp-1', 60_000)).resolves.toBeUndefined();
  await expect(floor.claim(key, 'fp-2', 60_000)).resolves.toEqual({ fingerprint: 'fp-1' });
  await floor.complete(key, { fingerprint: 'fp-1', status: 201, body: '{"id":"ch_1","note":"a\\nb"}' }, 60_000);
  await expect(floor.claim(key, 'fp-1', 60_000)).resolves.toEqual({
    fingerprint: 'fp-1',
    status: 201,
    body: '{"id":"ch_1","note":"a\\nb"}',
  });
  // Concurrent claimers of a fresh key: exactly one takes it.
  const other = `k-${randomBytes(6).toString('hex')}`;
  const answers = await Promise.all(Array.from({ length: 8 }, () => floor.claim(other, 'fp', 60_000)));
  expect(answers.filter((a) => a === undefined)).toHaveLength(1);
}

describe('bench floors', () => {
  it('memory', async () => {
    await contract(memoryFloor());
  });

  it('Redis', async () => {
    const client = new Redis('redis://127.0.0.1:6379');
    const prefix = `bench-floor-test:${run}:`;
    try {
      await contract(redisFloor(client, prefix));
    } finally {
      const keys = await client.keys(`${prefix}*`);
      if (keys.length) await client.del(...keys);
      await client.quit();
    }
  });

  it('PostgreSQL', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url: 'postgres://postgres@127.0.0.1:5432/test' }).initialize();
    const pool = (dataSource.driver as unknown as { master: FloorPgPool }).master;
    const table = `bench_floor_test_${run}`;
    try {
      await createPostgresFloorTable(pool, table);
      await contract(postgresFloor(pool, table));
    } finally {
      await dataSource.query(`DROP TABLE IF EXISTS "${table}"`);
      await dataSource.destroy();
    }
  });

  it('MariaDB', async () => {
    const dataSource = await new DataSource({ type: 'mariadb', url: 'mysql://root@127.0.0.1:3306/test' }).initialize();
    const pool = (dataSource.driver as unknown as { pool: FloorMysqlPool }).pool;
    const table = `bench_floor_test_${run}`;
    try {
      await createMariadbFloorTable(pool, table);
      await contract(mariadbFloor(pool, table));
    } finally {
      await dataSource.query(`DROP TABLE IF EXISTS \`${table}\``);
      await dataSource.destroy();
    }
  });
});
