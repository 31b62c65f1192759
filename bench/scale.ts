/**
 * Does a store's cost stay flat as its data grows? Fills PostgreSQL, MariaDB and Redis
 * to scale with the library's own record format (copies of one record written through a
 * real `@Idempotent` route; no HTTP and no row-by-row writes for the rest), then, at each
 * size: claim, complete and replay latency through the store API at concurrency 1 and 16,
 * bytes per record (200-byte and 10 KB responses), and the purge of expired records while
 * claims run. Writes JSON and a markdown report beside it (bench/README.md, "The scale run").
 *
 *   node -r ./test/support/ts-require.js bench/scale.ts [--stores postgres,mariadb,redis]
 *     [--sizes 0,1000000,10000000] [--mariadb-sizes ...] [--redis-sizes 0,1000000]
 *     [--ops 2000] [--rounds 3] [--big-body-records 100000] [--purge-expired 1000000]
 *     [--purge-live 1000000] [--window-ms 5000] [--out bench/results/scale.json]
 *
 * Each run works in its own tables (`bench_scale_<pid>*`) and Redis prefix
 * (`bench:scale:<pid>:`) and drops them at the end.
 */
import 'reflect-metadata';
import { resolve } from 'node:path';
import { DEFAULT_URLS, numberFlags, parseFlags } from './args.js';
import { runMain, writeRun } from './harness.js';
import { describeLib } from './lib.js';
import { measureLatency, populationKey, warmUp, type LatencyRun, type Workload } from './scale-measure.js';
import { RedisTarget } from './scale-redis.js';
import { renderReport, type ScaleReport, type SizeFigures, type StoreFigures } from './scale-report.js';
import { SqlTarget, type RecordRow, type SqlKind } from './scale-sql.js';
import { TEMPLATE_TTL_MS, type ScaleTarget, type Template } from './scale-template.js';

type StoreKind = SqlKind | 'redis';

const config = {
  stores: ['postgres', 'mariadb', 'redis'] as StoreKind[],
  sizes: [0, 1_000_000, 10_000_000],
  mariadbSizes: undefined as number[] | undefined,
  redisSizes: undefined as number[] | undefined,
  ops: 2000,
  rounds: 3,
  bigBodyRecords: 100_000,
  purgeExpired: 1_000_000,
  purgeLive: 1_000_000,
  windowMs: 5_000,
  out: resolve('bench/results/scale.json'),
  postgresUrl: DEFAULT_URLS.postgres,
  mariadbUrl: DEFAULT_URLS.mariadb,
  redisUrl: DEFAULT_URLS.redis,
};
const numbers = (value: () => string) =>
  value()
    .split(',')
    .map((part) => Number(part.replace(/_/g, '')));
parseFlags(process.argv.slice(2), {
  '--stores': (value) => (config.stores = value().split(',') as StoreKind[]),
  '--sizes': (value) => (config.sizes = numbers(value)),
  '--mariadb-sizes': (value) => (config.mariadbSizes = numbers(value)),
  '--redis-sizes': (value) => (config.redisSizes = numbers(value)),
  ...numberFlags(config, ['ops', 'rounds', 'bigBodyRecords', 'purgeExpired', 'purgeLive', 'windowMs']),
  '--out': (value) => (config.out = resolve(value())),
});
const sizesOf: Record<StoreKind, number[]> = {
  postgres: config.sizes,
  mariadb: config.mariadbSizes ?? config.sizes,
  // A Redis of 10 M records needs more memory than the bench's machine has.
  redis: config.redisSizes ?? config.sizes.filter((size) => size <= 1_000_000),
};

const runId = String(process.pid);
const startedAt = Date.now();

function log(line: string): void {
  process.stderr.write(`[scale ${new Date().toISOString().slice(11, 19)} +${Math.round((Date.now() - startedAt) / 1000)}s] ${line}\n`);
}

/** Warmed up, then both concurrencies once each. */
async function measurePair(store: Parameters<typeof measureLatency>[0], workload: Workload): Promise<LatencyRun[]> {
  await warmUp(store, workload);
  return [await measureLatency(store, workload, config.ops, 1), await measureLatency(store, workload, config.ops, 16)];
}

/**
 * One store: the template, then at each size the fill, its bytes and the timed rounds;
 * the 10 KB body's bytes; the purge (SQL). SQL measures a filled table and an empty one
 * alternately, each round; Redis has one keyspace per database, so its empty figures are
 * the run at size 0 before the fill, and once more after the delete, for the drift.
 */
async function runStore<R>(kind: StoreKind, target: ScaleTarget<R>, figures: StoreFigures, save: () => void): Promise<void> {
  const sql = target instanceof SqlTarget ? target : undefined;
  const base = sql ? `bench_scale_${runId}` : `bench:scale:${runId}:`;
  const spaces = sql
    ? { big: base, empty: `${base}_e`, bigBody: `${base}_10k`, purge: `${base}_p` }
    : { big: base, empty: base, bigBody: `${base}10k:`, purge: '' };
  try {
    await target.create(spaces.big);
    if (sql) await target.create(spaces.empty);
    const template: Template<R> = await target.template(spaces.big, 200);
    figures.template = template.shown;
    const workload = (size: number): Workload => ({
      fingerprint: template.fingerprint,
      result: template.result,
      ttl: TEMPLATE_TTL_MS,
      replayKey: size > 0 ? () => populationKey('live:', Math.floor(Math.random() * size)) : undefined,
    });
    const bigStore = target.store(spaces.big);
    const emptyStore = sql ? target.store(spaces.empty) : bigStore;
    let filled = 0;
    let bytesPerRecord = 2_000;
    for (const size of sizesOf[kind]) {
      const entry: SizeFigures = { size, empty: [], filled: [] };
      if (size > filled) {
        const need = (size - filled) * bytesPerRecord * 1.5 + 5e9;
        const free = await target.freeBytes();
        if (need > free) {
          figures.notes.push(`size ${size} left out: it needs about ${(need / 1e9).toFixed(1)} GB, ${(free / 1e9).toFixed(1)} GB free`);
          log(figures.notes.at(-1)!);
          break;
        }
        log(`${kind}: filling ${filled} -> ${size}`);
        entry.fillMs = await target.fill(spaces.big, 'live:', template.record, filled, size);
        entry.fillRowsPerSecond = Math.round(((size - filled) / entry.fillMs) * 1000);
        log(`${kind}: filled in ${entry.fillMs} ms (${entry.fillRowsPerSecond} rows/s)`);
        const settled = await target.settle?.(spaces.big);
        if (settled) entry.settleMs = settled.ms;
        if (settled?.dirtyPagesLeft !== undefined) entry.dirtyPagesLeft = settled.dirtyPagesLeft;
        filled = size;
      }
      if (size > 0) {
        const { bytes, encodings } = await target.bytes(spaces.big, 'live:', size);
        entry.bytes = bytes;
        if (encodings) entry.encodings = encodings;
        bytesPerRecord = bytes.total / bytes.rows;
        log(`${kind}: ${bytes.rows} records, ${Math.round(bytesPerRecord)} bytes per record`);
      }
      if (target instanceof RedisTarget) entry.dbSize = await target.dbSize();
      for (let round = 0; round < config.rounds; round++) {
        // Empty and filled alternate, so that drift of the shared machine falls on both.
        if (sql) await sql.truncate(spaces.empty);
        if (sql || size === 0) entry.empty.push(...(await measurePair(emptyStore, workload(0))));
        if (size > 0) entry.filled.push(...(await measurePair(bigStore, workload(size))));
      }
      log(`${kind}: size ${size} measured`);
      figures.sizes.push(entry);
      save();
    }
    if (target instanceof RedisTarget) {
      await target.drop(spaces.big);
      // The drift check: empty again, after the population is gone.
      const after: SizeFigures = { size: 0, empty: [], filled: [], afterDelete: true, dbSize: await target.dbSize() };
      for (let round = 0; round < config.rounds; round++) after.empty.push(...(await measurePair(bigStore, workload(0))));
      figures.sizes.push(after);
    }
    // The 200-byte population's bytes per record: the largest size measured.
    const largest = figures.sizes.filter((entry) => entry.bytes).at(-1);
    const resultChars = template.result.length;
    figures.bodies.push({ bodyBytes: template.written.bodyBytes, resultChars, bytes: largest?.bytes, encodings: largest?.encodings });
    if (config.bigBodyRecords > 0) {
      await target.create(spaces.bigBody);
      const big = await target.template(spaces.bigBody, 10_240);
      const fillMs = await target.fill(spaces.bigBody, 'big:', big.record, 0, config.bigBodyRecords);
      await target.settle?.(spaces.bigBody);
      const { bytes, encodings } = await target.bytes(spaces.bigBody, 'big:', config.bigBodyRecords);
      figures.bodies.push({ bodyBytes: big.written.bodyBytes, resultChars: big.result.length, bytes, fillMs, encodings });
      save();
      log(`${kind}: 10 KB body, ${Math.round(bytes.total / bytes.rows)} bytes per record`);
      await target.drop(spaces.bigBody);
    }
    if (sql && config.purgeExpired > 0) {
      await target.drop(spaces.big);
      log(`${kind}: purge test`);
      const counts = { expired: config.purgeExpired, live: config.purgeLive };
      const record = template.record as unknown as RecordRow;
      figures.purge = await sql.purge(spaces.purge, record, counts, config.windowMs, (line) => log(`${kind}: ${line}`));
      log(`${kind}: purge ${figures.purge.rowsPerSecond} rows/s, claims p99 ×${figures.purge.p99Ratio}`);
    }
  } finally {
    for (const space of new Set(Object.values(spaces).filter(Boolean))) await target.drop(space).catch(() => undefined);
    await target.close();
  }
}

async function main(): Promise<void> {
  const report: ScaleReport = {
    startedAt: new Date(startedAt).toISOString(),
    lib: describeLib(),
    config: { ...config, mariadbSizes: sizesOf.mariadb, redisSizes: sizesOf.redis, out: undefined },
    command: `node -r ./test/support/ts-require.js bench/scale.ts ${process.argv.slice(2).join(' ')}`.trim(),
    stores: [],
  };
  // Written after every size and store, so that a step that fails or is stopped keeps what came before it.
  const save = () => {
    report.durationMs = Date.now() - startedAt;
    writeRun(config.out, report, renderReport(report));
  };
  for (const kind of config.stores) {
    let figures: StoreFigures | undefined;
    try {
      const target: ScaleTarget<unknown> =
        kind === 'redis'
          ? await RedisTarget.open(config.redisUrl)
          : await SqlTarget.open(kind, kind === 'postgres' ? config.postgresUrl : config.mariadbUrl);
      figures = { store: kind, server: await target.describe(), sizes: [], bodies: [], notes: [] };
      report.stores.push(figures);
      await runStore(kind, target, figures, save);
    } catch (error) {
      log(`${kind} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      const note = `the run failed: ${String(error)}`;
      if (figures) figures.notes.push(note);
      else report.stores.push({ store: kind, server: '', sizes: [], bodies: [], notes: [note] });
    }
    save();
  }
  process.stdout.write(renderReport(report));
}

runMain(main, log);
