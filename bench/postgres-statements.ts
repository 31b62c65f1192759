/**
 * What one claim + complete, one replay (a claim that finds the completed record) and one
 * `runIdempotentTransaction` cost on PostgreSQL, with and without prepared statements,
 * with and without `statementTimeout`, and against the floor of bench/floors.ts (the
 * same round trips by hand on the same pool), without HTTP: operations per second, app
 * CPU and PostgreSQL server CPU per operation.
 *
 *   npm run bench:postgres [-- --ops 4000 --concurrency 50 --rounds 2]
 *
 * The server CPU is read from /proc (every process named `postgres`, so run it on the
 * database host, with nothing else using that server). Linux only.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { DataSource } from 'typeorm';
import { createPostgresFloorTable, postgresFloor, type FloorPgPool } from './floors.js';
import { numberArg } from './args.js';
import { loadLibModule } from './lib.js';

const { TypeOrmIdempotencyStore, createIdempotencyRecordsMigration, runIdempotentTransaction } =
  loadLibModule<typeof import('../lib/typeorm/index.js')>('typeorm/index.ts');

/** CPU time of every `postgres` process, µs (utime + stime; 100 ticks per second). */
function postgresCpuMicros(): number {
  let total = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'postgres') continue;
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      total += (Number(fields[11]) + Number(fields[12])) * 10_000;
    } catch {
      // The process ended while being read.
    }
  }
  return total;
}

async function main(): Promise<void> {
  const ops = numberArg('ops', 4000);
  const concurrency = numberArg('concurrency', 50);
  const rounds = numberArg('rounds', 2);
  const table = `bench_statements_${process.pid}`;
  const dataSource = new DataSource({
    type: 'postgres',
    url: process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    extra: { max: 20 },
  });
  await dataSource.initialize();
  try {
    const Migration = createIdempotencyRecordsMigration(table);
    const runner = dataSource.createQueryRunner();
    await new Migration().up(runner);
    await runner.release();
    const pool = (dataSource.driver as unknown as { master: FloorPgPool }).master;
    await createPostgresFloorTable(pool, `${table}_floor`);
    const floor = postgresFloor(pool, `${table}_floor`);
    type Variant = 'prepared (default)' | 'statementTimeout: 0' | 'preparedStatements: false' | 'floor (by hand)';
    const stores = {
      'prepared (default)': new TypeOrmIdempotencyStore(dataSource, { tableName: table }),
      'statementTimeout: 0': new TypeOrmIdempotencyStore(dataSource, { tableName: table, statementTimeout: 0 }),
      'preparedStatements: false': new TypeOrmIdempotencyStore(dataSource, { tableName: table, preparedStatements: false }),
    };
    let n = 0;
    const nextKey = () => `k${process.pid}-${++n}`;
    const result = '{"kind":"value","value":{"t":"u"}}';
    const replayKey = nextKey();
    const replayToken = randomUUID();
    await stores['prepared (default)'].claim(replayKey, { token: replayToken, leaseTtl: 30_000, fingerprint: 'f' });
    await stores['prepared (default)'].complete(replayKey, replayToken, { result, ttl: 600_000 });
    await floor.claim(replayKey, 'f', 30_000);
    await floor.complete(replayKey, { fingerprint: 'f', status: 201, body: result }, 600_000);
    const cases: Record<string, Partial<Record<Variant, () => Promise<unknown>>>> = {
      'claim + complete': {
        ...Object.fromEntries(
          Object.entries(stores).map(([variant, store]) => [
            variant,
            async () => {
              const key = nextKey();
              const token = randomUUID();
              await store.claim(key, { token, leaseTtl: 30_000, fingerprint: 'f' });
              await store.complete(key, token, { result, ttl: 600_000 });
            },
          ]),
        ),
        'floor (by hand)': async () => {
          const key = nextKey();
          await floor.claim(key, 'f', 30_000);
          await floor.complete(key, { fingerprint: 'f', status: 201, body: result }, 600_000);
        },
      },
      // A duplicate: one claim that finds the completed record (the same key every time, as a retry storm's).
      replay: {
        ...Object.fromEntries(
          Object.entries(stores).map(([variant, store]) => [
            variant,
            () => store.claim(replayKey, { token: randomUUID(), leaseTtl: 30_000, fingerprint: 'f' }),
          ]),
        ),
        'floor (by hand)': () => floor.claim(replayKey, 'f', 30_000),
      },
      'runIdempotentTransaction, first execution': {
        'prepared (default)': () => runIdempotentTransaction(dataSource, { key: nextKey(), tableName: table }, async () => ({ ok: true })),
        'preparedStatements: false': () =>
          runIdempotentTransaction(dataSource, { key: nextKey(), tableName: table, preparedStatements: false }, async () => ({ ok: true })),
      },
    };
    const lines = [
      '| operation | variant | round | operations / s | app CPU µs / op | PostgreSQL CPU µs / op |',
      '|---|---|--:|--:|--:|--:|',
    ];
    for (let round = 1; round <= rounds; round++) {
      for (const [operation, variants] of Object.entries(cases)) {
        for (const [variant, run] of Object.entries(variants)) {
          const cpuBefore = process.cpuUsage();
          const serverBefore = postgresCpuMicros();
          const startedAt = Date.now();
          for (let done = 0; done < ops; done += concurrency) {
            await Promise.all(Array.from({ length: Math.min(concurrency, ops - done) }, () => run()));
          }
          const elapsed = Date.now() - startedAt;
          const cpu = process.cpuUsage(cpuBefore);
          const server = postgresCpuMicros() - serverBefore;
          lines.push(
            `| ${operation} | ${variant} | ${round} | ` +
              `${((ops / elapsed) * 1000).toFixed(0)} | ${((cpu.user + cpu.system) / ops).toFixed(0)} | ${(server / ops).toFixed(0)} |`,
          );
        }
      }
    }
    process.stdout.write(`${ops} operations per run, ${concurrency} at once, pool of 20\n\n${lines.join('\n')}\n`);
  } finally {
    for (const t of [table, `${table}_floor`]) await dataSource.query(`DROP TABLE IF EXISTS "${t}"`).catch(() => undefined);
    await dataSource.destroy();
  }
}

void main();
