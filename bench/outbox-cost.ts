// What one staged outbox message adds to an execution, per store (issue 44): the same
// execution with and without `IdempotencyOutbox.emit()` of one message, sequentially on one
// connection, the two variants alternated round by round so drift hits both alike. The relay
// is not running: this is the cost on the request's path (staging, and the row written with
// the completion), not the send.
//
//   npm run bench:outbox [-- --calls 2000] [--rounds 5]
//
// Stores: memory and Redis (makeIdempotent: the message staged with the completion, in
// the completing script on Redis), PostgreSQL and MariaDB through TypeORM, each as a
// lease-based execution (makeIdempotent on the store: claim, then the completion and the
// row in one transaction) and as runIdempotentTransaction (the row in the work's transaction).
// Figures and the commit they were measured on: docs/outbox.md, "What it costs".
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { stageOutboxMessage } from '../lib/core/outbox.js';
import { MemoryIdempotencyStore, makeIdempotent, type IdempotencyStore } from '../lib/index.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../lib/redis/index.js';
import { TypeOrmIdempotencyStore, runIdempotentTransaction } from '../lib/typeorm/index.js';
import { mariadbConnection } from '../test/support/mariadb.js';
import { pgConnection } from '../test/support/postgres.js';
import { numberFlags, parseFlags } from './args.js';
import { deleteByPrefix, runMain } from './harness.js';
import { median, round } from './stats.js';

const options = { calls: 2_000, rounds: 5 };
parseFlags(process.argv.slice(2), numberFlags(options, ['calls', 'rounds']));

type Execution = (key: string, withMessage: boolean) => Promise<unknown>;

const emitOne = () => stageOutboxMessage('EVENTS', 'refund.completed', { refundId: 'r', amount: 10 });

function leased(store: IdempotencyStore): Execution {
  const plain = makeIdempotent(async (_key: string) => 'ok', { store, key: (key: string) => key, scope: 'bench-plain' });
  const staged = makeIdempotent(
    async (_key: string) => {
      emitOne();
      return 'ok';
    },
    { store, key: (key: string) => key, scope: 'bench-staged' },
  );
  return (key, withMessage) => (withMessage ? staged(key) : plain(key));
}

function transactional(dataSource: DataSource, table: string): Execution {
  return (key, withMessage) =>
    runIdempotentTransaction(dataSource, { key, tableName: table }, async () => {
      if (withMessage) emitOne();
      return 'ok';
    });
}

/** µs per execution of each variant, per round. */
async function measure(execute: Execution): Promise<{ without: number; with: number }> {
  const runs = { without: [] as number[], with: [] as number[] };
  const prefix = randomBytes(4).toString('hex');
  for (let i = 0; i < 200; i++) await execute(`${prefix}-warm-${i}-${i % 2}`, i % 2 === 0);
  for (let roundNo = 0; roundNo < options.rounds * 2; roundNo++) {
    const withMessage = roundNo % 2 === 1;
    const startedAt = process.hrtime.bigint();
    for (let i = 0; i < options.calls; i++) await execute(`${prefix}-${roundNo}-${i}`, withMessage);
    const us = Number(process.hrtime.bigint() - startedAt) / 1_000 / options.calls;
    (withMessage ? runs.with : runs.without).push(us);
  }
  return { without: median(runs.without), with: median(runs.with) };
}

async function sqlStore(options: ConstructorParameters<typeof DataSource>[0], table: string) {
  const dataSource = new DataSource({
    ...options,
    extra: options.type === 'postgres' ? { max: 2 } : { connectionLimit: 2 },
  } as ConstructorParameters<typeof DataSource>[0]);
  await dataSource.initialize();
  const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
  await store.ensureTable();
  const drop = async () => {
    const q = dataSource.options.type === 'postgres' ? '"' : '`';
    for (const name of [`${table}_outbox`, `${table}_steps`, table]) await dataSource.query(`DROP TABLE IF EXISTS ${q}${name}${q}`);
    await dataSource.destroy();
  };
  return { dataSource, store, drop };
}

const signed = (n: number) => (n < 0 ? `${n}` : `+${n}`);

async function main(): Promise<void> {
  const rows: Array<[string, { without: number; with: number }]> = [];
  rows.push(['memory, makeIdempotent', await measure(leased(new MemoryIdempotencyStore({ maxEntries: 1_000_000 })))]);
  const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await redis.connect();
  const prefix = `bench:outbox:${randomBytes(4).toString('hex')}:`;
  try {
    rows.push(['Redis, makeIdempotent', await measure(leased(new RedisIdempotencyStore(redis, { prefix })))]);
  } finally {
    // Every key this run wrote (records and outbox) is under its own prefix.
    await deleteByPrefix(redis, prefix);
    await redis.quit();
  }
  for (const [name, options] of [
    ['PostgreSQL', pgConnection],
    ['MariaDB', { ...mariadbConnection, database: 'test' }],
  ] as const) {
    const table = `bench_outbox_${randomBytes(4).toString('hex')}`;
    const sql = await sqlStore(options as ConstructorParameters<typeof DataSource>[0], table);
    try {
      rows.push([`${name}, makeIdempotent on TypeOrmIdempotencyStore`, await measure(leased(sql.store))]);
      rows.push([`${name}, runIdempotentTransaction`, await measure(transactional(sql.dataSource, table))]);
    } finally {
      await sql.drop();
    }
  }
  console.log(
    `outbox cost: ${options.calls} sequential executions per round, ${options.rounds} rounds per variant, median µs per execution`,
  );
  console.log('| store and entry point | without | with one message | added |');
  console.log('| --- | ---: | ---: | ---: |');
  for (const [name, { without, with: staged }] of rows) {
    console.log(
      `| ${name} | ${round(without, 1)} | ${round(staged, 1)} | ${signed(round(staged - without, 1))} (${signed(round((staged / without - 1) * 100, 0))} %) |`,
    );
  }
}

runMain(main);
