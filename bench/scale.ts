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
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { numberArg, stringArg } from './args.js';
import { describeLib } from './lib.js';
import { measureLatency, warmUp, type LatencyRun, type Workload } from './scale-measure.js';
import { sqlPurge } from './scale-purge.js';
import { RedisTarget } from './scale-redis.js';
import { renderReport, type ScaleReport, type SizeFigures, type StoreFigures } from './scale-report.js';
import { populationKey, SqlTarget, type SqlKind, type TableBytes } from './scale-sql.js';
import { recordThroughHttp, TEMPLATE_TTL_MS } from './scale-template.js';

type StoreKind = SqlKind | 'redis';

const numbers = (text: string) => text.split(',').map((part) => Number(part.replace(/_/g, '')));

const sizes = numbers(stringArg('sizes', '0,1000000,10000000'));
const config = {
  stores: stringArg('stores', 'postgres,mariadb,redis').split(',') as StoreKind[],
  sizes,
  mariadbSizes: stringArg('mariadb-sizes') ? numbers(stringArg('mariadb-sizes')!) : sizes,
  redisSizes: stringArg('redis-sizes') ? numbers(stringArg('redis-sizes')!) : sizes.filter((size) => size <= 1_000_000),
  ops: numberArg('ops', 2000),
  rounds: numberArg('rounds', 3),
  bigBodyRecords: numberArg('big-body-records', 100_000),
  purgeExpired: numberArg('purge-expired', 1_000_000),
  purgeLive: numberArg('purge-live', 1_000_000),
  windowMs: numberArg('window-ms', 5_000),
  out: resolve(stringArg('out', 'bench/results/scale.json')),
  postgresUrl: process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  mariadbUrl: process.env.MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test',
  redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
};

const runId = String(process.pid);
const HOUR = 3_600_000;
const startedAt = Date.now();

function log(line: string): void {
  process.stderr.write(`[scale ${new Date().toISOString().slice(11, 19)} +${Math.round((Date.now() - startedAt) / 1000)}s] ${line}\n`);
}

/** Both concurrencies, once each. */
async function measurePair(store: Parameters<typeof measureLatency>[0], workload: Workload): Promise<LatencyRun[]> {
  return [await measureLatency(store, workload, config.ops, 1), await measureLatency(store, workload, config.ops, 16)];
}

async function runSql(kind: SqlKind, started: (figures: StoreFigures) => void, save: () => void): Promise<void> {
  const target = await SqlTarget.open(kind, kind === 'postgres' ? config.postgresUrl : config.mariadbUrl);
  const base = `bench_scale_${runId}`;
  const tables = { big: base, empty: `${base}_e`, bigBody: `${base}_10k`, purge: `${base}_p` };
  const figures: StoreFigures = { store: kind, server: await target.describe(), sizes: [], bodies: [], notes: [] };
  started(figures);
  try {
    await target.createTable(tables.big);
    await target.createTable(tables.empty);
    const written = await recordThroughHttp(target.store(tables.big), 200);
    const template = await target.readRow(tables.big, written.key);
    figures.template = { ...written, row: { ...template, result: `${template.result?.length} characters` } };
    // The SQL and Node derivations of a population key must agree, or replays would miss.
    await target.fill(tables.empty, 'check:', template, 0, 1, { latestExpiry: template.expires_at, spreadMs: HOUR });
    await target.readRow(tables.empty, populationKey('check:', 0));
    const workload = (size: number): Workload => ({
      fingerprint: template.fingerprint ?? undefined,
      result: template.result!,
      ttl: TEMPLATE_TTL_MS,
      replayKey: size > 0 ? () => populationKey('live:', Math.floor(Math.random() * size)) : undefined,
    });
    const bigStore = target.store(tables.big);
    const emptyStore = target.store(tables.empty);
    let filled = 0;
    let bytesPerRecord = 2_000;
    for (const size of kind === 'mariadb' ? config.mariadbSizes : config.sizes) {
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
        entry.fillMs = await target.fill(tables.big, 'live:', template, filled, size, {
          latestExpiry: template.expires_at,
          spreadMs: 12 * HOUR,
        });
        entry.fillRowsPerSecond = Math.round(((size - filled) / entry.fillMs) * 1000);
        log(`${kind}: filled in ${entry.fillMs} ms (${entry.fillRowsPerSecond} rows/s); settling`);
        const settled = await target.settle(tables.big);
        entry.settleMs = settled.ms;
        if (settled.dirtyPagesLeft !== undefined) entry.dirtyPagesLeft = settled.dirtyPagesLeft;
        filled = size;
      }
      if (size > 0) {
        entry.bytes = await target.bytes(tables.big);
        bytesPerRecord = entry.bytes.total / entry.bytes.rows;
        log(`${kind}: ${entry.bytes.rows} rows, ${Math.round(bytesPerRecord)} bytes per record`);
      }
      for (let round = 0; round < config.rounds; round++) {
        // Empty and filled alternate, so that drift of the shared machine falls on both.
        await target.truncate(tables.empty);
        await warmUp(emptyStore, workload(0));
        entry.empty.push(...(await measurePair(emptyStore, workload(0))));
        if (size > 0) {
          await warmUp(bigStore, workload(size));
          entry.filled.push(...(await measurePair(bigStore, workload(size))));
        }
      }
      log(`${kind}: size ${size} measured`);
      figures.sizes.push(entry);
      save();
    }
    figures.bodies.push(bodyFromSizes(figures.sizes, template.result!.length, written.bodyBytes));
    if (config.bigBodyRecords > 0) {
      await target.createTable(tables.bigBody);
      const big = await recordThroughHttp(target.store(tables.bigBody), 10_240);
      const bigTemplate = await target.readRow(tables.bigBody, big.key);
      const fillMs = await target.fill(tables.bigBody, 'big:', bigTemplate, 0, config.bigBodyRecords, {
        latestExpiry: bigTemplate.expires_at,
        spreadMs: 12 * HOUR,
      });
      await target.settle(tables.bigBody);
      const bytes = await target.bytes(tables.bigBody);
      figures.bodies.push({ bodyBytes: big.bodyBytes, resultChars: bigTemplate.result!.length, bytes, fillMs });
      save();
      log(`${kind}: 10 KB body, ${Math.round(bytes.total / bytes.rows)} bytes per record`);
      await target.dropTable(tables.bigBody);
    }
    if (config.purgeExpired > 0) {
      await target.dropTable(tables.big);
      await target.createTable(tables.purge);
      log(`${kind}: purge test`);
      figures.purge = await sqlPurge(
        target,
        tables.purge,
        template,
        { expired: config.purgeExpired, live: config.purgeLive },
        config.windowMs,
        (line) => log(`${kind}: ${line}`),
      );
      log(`${kind}: purge ${figures.purge.rowsPerSecond} rows/s, claims p99 ×${figures.purge.p99Ratio}`);
    }
  } finally {
    for (const table of Object.values(tables)) await target.dropTable(table).catch(() => undefined);
    await target.close();
  }
}

/** The 200-byte population's bytes per record: the largest size measured. */
function bodyFromSizes(
  entries: SizeFigures[],
  resultChars: number,
  bodyBytes: number,
): { bodyBytes: number; resultChars: number; bytes?: TableBytes } {
  const largest = entries.filter((entry) => entry.bytes).at(-1);
  return { bodyBytes, resultChars, bytes: largest?.bytes };
}

async function runRedis(started: (figures: StoreFigures) => void, save: () => void): Promise<void> {
  const target = await RedisTarget.open(config.redisUrl);
  const prefix = `bench:scale:${runId}:`;
  const figures: StoreFigures = { store: 'redis', server: await target.describe(), sizes: [], bodies: [], notes: [] };
  started(figures);
  try {
    const store = target.store(prefix);
    const written = await recordThroughHttp(store, 200);
    const raw = await target.rawRecord(store.redisKey(written.key));
    figures.template = {
      ...written,
      raw: { ...raw, fields: raw.fields.map((v, i) => (i % 2 && v.length > 80 ? `${v.length} characters` : v)) },
    };
    const resultOf = (fields: string[]) => fields[fields.indexOf('r') + 1];
    const workload = (size: number): Workload => ({
      fingerprint: raw.fields[raw.fields.indexOf('f') + 1],
      result: resultOf(raw.fields),
      ttl: TEMPLATE_TTL_MS,
      replayKey: size > 0 ? () => populationKey('live:', Math.floor(Math.random() * size)) : undefined,
    });
    let filled = 0;
    const memoryBefore = await target.usedMemory();
    for (const size of config.redisSizes) {
      const entry: SizeFigures = { size, empty: [], filled: [] };
      if (size > filled) {
        log(`redis: filling ${filled} -> ${size}`);
        entry.fillMs = await target.fill(prefix, 'live:', raw, filled, size);
        entry.fillRowsPerSecond = Math.round(((size - filled) / entry.fillMs) * 1000);
        filled = size;
      }
      if (size > 0) {
        const usage = await target.memoryUsage(prefix, 'live:', size, 1_000);
        const delta = (await target.usedMemory()) - memoryBefore;
        entry.bytes = {
          rows: size,
          total: usage.meanBytes * size,
          detail: { memoryUsageMean: usage.meanBytes, usedMemoryDeltaPerKey: delta / size },
        };
        entry.encodings = usage.encodings;
      }
      // Redis has one keyspace per database: a run at 0 is the database as it is (see dbsize).
      entry.dbSize = await target.dbSize();
      for (let round = 0; round < config.rounds; round++) {
        await warmUp(store, workload(size));
        (size > 0 ? entry.filled : entry.empty).push(...(await measurePair(store, workload(size))));
      }
      figures.sizes.push(entry);
      save();
      log(`redis: size ${size} measured`);
    }
    await target.deletePrefix(prefix);
    // The drift check: empty again, after the population is gone.
    const after: SizeFigures = { size: 0, empty: [], filled: [], afterDelete: true, dbSize: await target.dbSize() };
    for (let round = 0; round < config.rounds; round++) {
      await warmUp(store, workload(0));
      after.empty.push(...(await measurePair(store, workload(0))));
    }
    figures.sizes.push(after);
    const body = figures.sizes.filter((entry) => entry.bytes).at(-1);
    figures.bodies.push({
      bodyBytes: written.bodyBytes,
      resultChars: resultOf(raw.fields).length,
      bytes: body?.bytes,
      encodings: body?.encodings,
    });
    if (config.bigBodyRecords > 0) {
      const bigPrefix = `${prefix}10k:`;
      const bigStore = target.store(bigPrefix);
      const big = await recordThroughHttp(bigStore, 10_240);
      const bigRaw = await target.rawRecord(bigStore.redisKey(big.key));
      const before = await target.usedMemory();
      const fillMs = await target.fill(bigPrefix, 'big:', bigRaw, 0, config.bigBodyRecords);
      const usage = await target.memoryUsage(bigPrefix, 'big:', config.bigBodyRecords, 1_000);
      const delta = (await target.usedMemory()) - before;
      figures.bodies.push({
        bodyBytes: big.bodyBytes,
        resultChars: resultOf(bigRaw.fields).length,
        fillMs,
        encodings: usage.encodings,
        bytes: {
          rows: config.bigBodyRecords,
          total: usage.meanBytes * config.bigBodyRecords,
          detail: { memoryUsageMean: usage.meanBytes, usedMemoryDeltaPerKey: delta / config.bigBodyRecords },
        },
      });
      await target.deletePrefix(bigPrefix);
    }
  } finally {
    await target.deletePrefix(prefix).catch(() => undefined);
    await target.close();
  }
}

async function main(): Promise<void> {
  const report: ScaleReport = {
    startedAt: new Date(startedAt).toISOString(),
    lib: describeLib(),
    config: { ...config, out: undefined },
    command: `node -r ./test/support/ts-require.js bench/scale.ts ${process.argv.slice(2).join(' ')}`.trim(),
    stores: [],
  };
  // Written after every size and store, so that a step that fails or is stopped keeps what came before it.
  const save = () => {
    report.durationMs = Date.now() - startedAt;
    mkdirSync(dirname(config.out), { recursive: true });
    writeFileSync(config.out, JSON.stringify(report, null, 2) + '\n');
    writeFileSync(config.out.replace(/\.json$/, '') + '.md', renderReport(report));
  };
  for (const kind of config.stores) {
    let figures: StoreFigures | undefined;
    const started = (f: StoreFigures) => void report.stores.push((figures = f));
    try {
      await (kind === 'redis' ? runRedis(started, save) : runSql(kind, started, save));
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

void main().then(
  () => process.exit(0),
  (error: unknown) => {
    log(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(1);
  },
);
