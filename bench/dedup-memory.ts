/**
 * What remembering one message id costs, in bytes, on the Redis and PostgreSQL stores,
 * beside what a Bloom filter would need for the same ids (docs/recipes.md, "A Bloom
 * filter in front of the de-duplication table?"):
 *
 *   node -r ./test/support/ts-require.js bench/dedup-memory.ts
 *   DEDUP_N=20000 DEDUP_STORES=redis DEDUP_CASES=all node -r ./test/support/ts-require.js bench/dedup-memory.ts
 *
 * Every record is written the way a message handler writes it: `makeIdempotent` (the
 * engine `@Idempotent()` uses) over the real store, one claim and one complete per
 * message, 100 at once. Redis: `MEMORY USAGE` of sampled keys and the `used_memory`
 * delta of `INFO memory` (the server's whole dataset: run it on a quiet Redis).
 * PostgreSQL: heap and index sizes of the records table as written (each record also
 * leaves the dead version its `complete` replaced), then after `VACUUM FULL` (live rows
 * only). Writes under its own Redis prefix and table, removed at the end.
 *
 * Environment: DEDUP_N (records per case, default 100000), DEDUP_STORES (redis,typeorm),
 * DEDUP_CASES (event,reply by default; any of event,event-nofp,reply,reply-150, or all),
 * REDIS_URL, DATABASE_URL. The default run takes about 2 minutes; DEDUP_CASES=all about 4.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import type { IdempotencyStore } from '../lib/core/index.js';
import { loadLib, loadLibModule } from './lib.js';

const { makeIdempotent } = loadLib();
const { RedisIdempotencyStore, recommendedRedisOptions } = loadLibModule<typeof import('../lib/redis/index.js')>('redis/index.ts');
const { TypeOrmIdempotencyStore, createIdempotencyRecordsMigration } =
  loadLibModule<typeof import('../lib/typeorm/index.js')>('typeorm/index.ts');

interface OrderPaid {
  id: string;
  orderId: number;
  amount: number;
  currency: string;
}

/** One kind of handler: what it returns (the stored result) and whether the payload is fingerprinted. */
interface Case {
  name: string;
  description: string;
  fingerprint: boolean;
  handle: (message: OrderPaid) => Promise<unknown>;
}

const CASES: Case[] = [
  {
    name: 'event',
    description: '@EventPattern: returns nothing, payload fingerprinted (the default)',
    fingerprint: true,
    handle: async () => undefined,
  },
  {
    name: 'event-nofp',
    description: 'same, with fingerprint: false',
    fingerprint: false,
    handle: async () => undefined,
  },
  {
    name: 'reply',
    description: '@MessagePattern: small reply ({ shipped, parcel }), payload fingerprinted',
    fingerprint: true,
    handle: async (message) => ({ shipped: message.orderId, parcel: `p_${message.orderId}` }),
  },
  {
    name: 'reply-150',
    description: '@MessagePattern: a reply of ~150 bytes, payload fingerprinted',
    fingerprint: true,
    handle: async (message) => ({
      id: `ch_${message.id}`,
      orderId: message.orderId,
      amount: message.amount,
      currency: message.currency,
      status: 'succeeded',
      receipt: `https://pay.example/r/${message.orderId}`,
    }),
  },
];

const N = Number(process.env.DEDUP_N ?? 100_000);
if (!Number.isSafeInteger(N) || N < 1000) throw new Error(`DEDUP_N must be a whole number of at least 1000, got ${process.env.DEDUP_N}`);
const STORES = (process.env.DEDUP_STORES ?? 'redis,typeorm').split(',');
const CASE_NAMES = process.env.DEDUP_CASES === 'all' ? CASES.map((c) => c.name) : (process.env.DEDUP_CASES ?? 'event,reply').split(',');
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const CONCURRENCY = 100;
const RUN_ID = `${process.pid}`;

/** Bloom filter at false-positive rate p: -ln(p) / ln(2)^2 bits per element (9.59 at 1%). */
const bloomBitsPerId = (p: number) => -Math.log(p) / Math.LN2 ** 2;

interface Row {
  store: string;
  caseName: string;
  measure: string;
  bytes: number;
  note: string;
}

/** Writes `n` completed records through `makeIdempotent`, `CONCURRENCY` at once; returns the seconds it took. */
async function writeRecords(store: IdempotencyStore, kase: Case, n: number): Promise<number> {
  const handleOnce = makeIdempotent(kase.handle, {
    store,
    scope: `order-paid-${kase.name}`,
    key: (message) => message.id,
    fingerprint: kase.fingerprint,
  });
  const startedAt = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < n) {
        const i = next++;
        await handleOnce({ id: randomUUID(), orderId: 1_000_000 + i, amount: 1999 + (i % 1000), currency: 'EUR' });
      }
    }),
  );
  return (Date.now() - startedAt) / 1000;
}

async function usedMemory(client: Redis): Promise<number> {
  const info = await client.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)![1]);
}

async function keysOf(client: Redis, pattern: string, limit = Infinity): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [nextCursor, batch] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = nextCursor;
    keys.push(...batch);
  } while (cursor !== '0' && keys.length < limit);
  return keys.slice(0, limit === Infinity ? undefined : limit);
}

async function measureRedis(kase: Case, rows: Row[]): Promise<void> {
  const client = new Redis(REDIS_URL, {
    ...recommendedRedisOptions({ commandTimeout: 10_000 }),
    enableAutoPipelining: true,
    lazyConnect: true,
  });
  client.on('error', () => undefined); // errors surface through the commands and fail the run
  await client.connect();
  // The same length for every case, near the store's default ('idempotency:'), so keys weigh alike.
  const prefix = `dedup-${RUN_ID}-${CASES.indexOf(kase)}:`;
  const store = new RedisIdempotencyStore(client, { prefix });
  try {
    await writeRecords(store, kase, 10); // loads the scripts before the baseline
    await deleteKeys(client, `${prefix}*`);
    const before = await usedMemory(client);
    const seconds = await writeRecords(store, kase, N);
    const after = await usedMemory(client);
    const sample = await keysOf(client, `${prefix}*`, 1000);
    let sampled = 0;
    for (const key of sample) sampled += Number(await client.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
    const encoding = String(await client.call('OBJECT', 'ENCODING', sample[0]));
    const fields = (await client.hgetall(sample[0])) as Record<string, string>;
    const resultBytes = Buffer.byteLength(fields.r ?? '');
    rows.push(
      {
        store: 'redis',
        caseName: kase.name,
        measure: 'MEMORY USAGE per key (mean of 1000)',
        bytes: sampled / sample.length,
        note: `${encoding}, result ${resultBytes} B, key ${Buffer.byteLength(sample[0])} B`,
      },
      {
        store: 'redis',
        caseName: kase.name,
        measure: `used_memory delta / ${N}`,
        bytes: (after - before) / N,
        note: `${(N / seconds).toFixed(0)} records/s written`,
      },
    );
    const beforeDelete = await usedMemory(client);
    await deleteKeys(client, `${prefix}*`);
    rows.push({
      store: 'redis',
      caseName: kase.name,
      measure: `used_memory freed on DEL / ${N}`,
      bytes: (beforeDelete - (await usedMemory(client))) / N,
      note: 'cross-check of the delta',
    });
  } finally {
    await deleteKeys(client, `${prefix}*`).catch(() => undefined);
    client.disconnect();
  }
}

async function deleteKeys(client: Redis, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [nextCursor, keys] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = nextCursor;
    if (keys.length) await client.del(...keys);
  } while (cursor !== '0');
}

interface PgSizes {
  heap: number;
  primaryKey: number;
  expiryIndex: number;
  total: number;
}

async function pgSizes(dataSource: DataSource, table: string): Promise<PgSizes> {
  const [sizes] = (await dataSource.query(
    `SELECT pg_relation_size($1::regclass) AS heap, pg_relation_size($2::regclass) AS pk,
            pg_relation_size($3::regclass) AS expiry, pg_total_relation_size($1::regclass) AS total`,
    [`"${table}"`, `"pk_${table}"`, `"idx_${table}_expires_at"`],
  )) as Array<Record<string, string>>;
  return { heap: Number(sizes.heap), primaryKey: Number(sizes.pk), expiryIndex: Number(sizes.expiry), total: Number(sizes.total) };
}

async function measurePostgres(kase: Case, rows: Row[]): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url: DATABASE_URL, extra: { max: 20 } });
  await dataSource.initialize();
  const table = `bench_dedup_${RUN_ID}_${kase.name.replace(/-/g, '_')}`;
  try {
    const runner = dataSource.createQueryRunner();
    try {
      await new (createIdempotencyRecordsMigration(table))().up(runner);
    } finally {
      await runner.release();
    }
    // Autovacuum would clean the dead versions part-way through and make the figures depend on timing.
    await dataSource.query(`ALTER TABLE "${table}" SET (autovacuum_enabled = false)`);
    const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
    const seconds = await writeRecords(store, kase, N);
    const [{ result }] = (await dataSource.query(`SELECT "result" FROM "${table}" LIMIT 1`)) as Array<{ result: string }>;
    const written = await pgSizes(dataSource, table);
    await dataSource.query(`VACUUM FULL "${table}"`);
    const compacted = await pgSizes(dataSource, table);
    for (const [label, sizes] of [
      ['as written', written],
      ['after VACUUM FULL', compacted],
    ] as const) {
      rows.push({
        store: 'postgres',
        caseName: kase.name,
        measure: `pg_total_relation_size / ${N}, ${label}`,
        bytes: sizes.total / N,
        note:
          `heap ${(sizes.heap / N).toFixed(0)} + primary key ${(sizes.primaryKey / N).toFixed(0)} + expires_at index ${(sizes.expiryIndex / N).toFixed(0)}` +
          (label === 'as written' ? `; result ${Buffer.byteLength(result)} B; ${(N / seconds).toFixed(0)} records/s written` : ''),
      });
    }
  } finally {
    await dataSource.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => undefined);
    await dataSource.destroy();
  }
}

async function main(): Promise<void> {
  const cases = CASES.filter((c) => CASE_NAMES.includes(c.name));
  const rows: Row[] = [];
  const startedAt = Date.now();
  for (const kase of cases) {
    if (STORES.includes('redis')) await measureRedis(kase, rows);
    if (STORES.includes('typeorm')) await measurePostgres(kase, rows);
  }
  const bloomBits = bloomBitsPerId(0.01);
  const lines = [
    `${N} message ids per case, written through makeIdempotent (${CONCURRENCY} at once), in ${((Date.now() - startedAt) / 1000).toFixed(0)} s`,
    '',
    ...cases.map((c) => `- ${c.name}: ${c.description}`),
    '',
    '| store | case | measure | bytes per id | |',
    '|---|---|---|--:|---|',
    ...rows.map((r) => `| ${r.store} | ${r.caseName} | ${r.measure} | ${r.bytes.toFixed(0)} | ${r.note} |`),
    `| Bloom filter | | 1% false positives, k = 7 (computed) | ${(bloomBits / 8).toFixed(2)} | ${bloomBits.toFixed(2)} bits; ${((N * bloomBits) / 8 / 1024).toFixed(0)} KiB for ${N} ids |`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

void main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
