/**
 * What idempotency costs, per store, against the bare handler and against its floor, in
 * one run (bench/README.md says how to run and read it):
 *
 *   npm run bench                                   # Express then Fastify, about 30 min
 *   npm run bench -- --platform fastify --stores memory,redis --duration 1 --rounds 1   # a quick look
 *   BENCH_LIB=/tmp/before/lib npm run bench         # the same against another copy of lib/
 *
 * The app runs in a child process (bench/app.ts); autocannon drives it from this
 * process. Runs are interleaved (bare, store A, bare, floor of A, bare, store B, ..., bare)
 * and every store figure is compared with the median of the six bare runs around it
 * (`baselineOf`), so drift of a shared machine cancels out; the report gives medians over
 * rounds. The JSON's shape, the targets and the report: bench/report.ts.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEFAULT_URLS, listOf, numberFlags, parseFlags, requirePositive, sharedFlags } from './args.js';
import { writeCharts } from './chart.js';
import type { FloorName } from './floors.js';
import { machineInfo, replaceBetweenMarkers, ROOT, runMain, writeRun } from './harness.js';
import { describeLib } from './lib.js';
import { AppProcess, cannon, sampleOf, storeReplayed, type RunSample, type Target } from './load.js';
import {
  checkTargets,
  fmt,
  HTTP_CASES,
  PLATFORMS,
  markdownReport,
  type BenchOptions,
  type BenchResult,
  type CaseSummary,
  type FloorComparison,
  type HttpCase,
  type Platform,
  type PlatformResult,
  type Variant,
} from './report.js';
import { median, round, speedGauge } from './stats.js';
import { ALL_STORES, FLOOR_OF, storeModuleReady, type StoreName } from './stores.js';

const DEFAULT_OUT = join(ROOT, 'bench', 'results', 'latest.json');
const BENCH_LIB_OUT = join(ROOT, '.tmp', 'bench-lib.json');
const DOCS_START = '<!-- bench:results:start -->';
const DOCS_END = '<!-- bench:results:end -->';

/** Puts the report between the markers of docs/performance.md, so the doc shows the latest run. */
function updateDocs(report: string): void {
  if (replaceBetweenMarkers(DOCS_START, DOCS_END, report)) process.stderr.write(`Updated ${join(ROOT, 'docs', 'performance.md')}\n`);
}
/** The stores on the bench's Redis, whose script calls are also counted on the server (INFO commandstats). */
const REDIS_STORES: readonly StoreName[] = ['redis', 'redisNear', 'node-redis'];

export function parseArgs(argv: string[]): BenchOptions {
  const options: BenchOptions = {
    platforms: ['express', 'fastify'],
    duration: 2,
    rounds: 5,
    connections: 50,
    latencyConnections: 1,
    stores: ALL_STORES.filter(storeModuleReady),
    cases: [...HTTP_CASES],
    // ioredis's own default: auto-pipelining only costs CPU when each request sends its commands in its own I/O callback (docs/performance.md, "What we learned").
    autoPipelining: false,
    redisUrl: DEFAULT_URLS.redis,
    postgresUrl: DEFAULT_URLS.postgres,
    mariadbUrl: DEFAULT_URLS.mariadb,
    // Figures of another lib (BENCH_LIB) must not pass for this tree's: they go to a
    // git-ignored file, and the docs keep this tree's table.
    out: process.env.BENCH_LIB ? BENCH_LIB_OUT : DEFAULT_OUT,
    updateDocs: !process.env.BENCH_LIB,
  };
  parseFlags(argv, {
    ...sharedFlags(options, 'bench'),
    ...numberFlags(options, ['latencyConnections']),
    '--platform': (value) => (options.platforms = listOf('--platform', value(), PLATFORMS, 'platform')),
    '--stores': (value) => (options.stores = listOf('--stores', value(), ALL_STORES, 'store')),
    '--cases': (value) => (options.cases = listOf('--cases', value(), HTTP_CASES, 'case')),
    '--postgres-url': (value) => (options.postgresUrl = value()),
    '--mariadb-url': (value) => (options.mariadbUrl = value()),
    '--from': (value) => (options.from = resolve(value())),
    '--cpu-prof': (_value, inline) => (options.cpuProfileDir = resolve(inline ?? join(ROOT, 'bench', 'results', 'profiles'))),
  });
  requirePositive(options, ['duration', 'rounds', 'connections', 'latencyConnections']);
  return options;
}

/** EVAL/EVALSHA calls the Redis server executed so far (shared server: other clients add to it). */
async function redisScriptCalls(redis: import('ioredis').Redis): Promise<number> {
  const info = await redis.info('commandstats');
  let total = 0;
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) total += Number(match[2]);
  return total;
}

async function runPlatform(platform: Platform, options: BenchOptions, runId: string, log: (line: string) => void): Promise<PlatformResult> {
  const httpCases = HTTP_CASES.filter((c) => options.cases.includes(c));
  const conflictSeconds = Math.max(1, options.duration / 2);
  const app = await AppProcess.start(
    {
      platform,
      stores: options.stores,
      slowMs: Math.ceil(conflictSeconds * 1000) + 3_000,
      runId: `${runId}${platform[0]}`,
      autoPipelining: options.autoPipelining,
      redisUrl: options.redisUrl,
      postgresUrl: options.postgresUrl,
      mariadbUrl: options.mariadbUrl,
    },
    options.cpuProfileDir,
  );
  let redis: import('ioredis').Redis | undefined;
  if (app.stores.some((s) => REDIS_STORES.includes(s))) {
    const { Redis } = await import('ioredis');
    redis = new Redis(options.redisUrl, { lazyConnect: true });
    await redis.connect();
  }
  try {
    const allBare: RunSample[] = [];
    // The bare runs on few connections, which pair only with the latency case.
    const fewBare: RunSample[] = [];
    const samples = new Map<string, Entry[]>();
    // The floors have no slow route: the conflict case is the library's alone. Each floor
    // runs right after the library stores it is the floor of, so both see the same drift.
    const variants = (c: HttpCase): Variant[] =>
      c === 'conflict' ? app.stores : [...measureOrder(app.stores, app.floors), ...(c === 'first' ? (['interceptor'] as const) : [])];
    const isStore = (v: Variant | 'bare'): v is StoreName => (app.stores as string[]).includes(v);

    /** One timed run, with the store calls, backend calls and app CPU it caused. */
    const measure = async (
      variant: Variant | 'bare',
      path: string,
      key: Target['key'],
      duration: number,
      connections?: number,
    ): Promise<RunSample> => {
      const before = await app.counts();
      const onRedis = REDIS_STORES.includes(variant as StoreName);
      const serverBefore = onRedis && redis ? await redisScriptCalls(redis) : 0;
      const sample = sampleOf(await cannon(app.port, { path, key, duration }, connections ?? options.connections));
      const after = await app.settledCounts();
      sample.cpuMicrosPerRequest = (after.cpuMicros - before.cpuMicros) / sample.requests;
      if (isStore(variant)) {
        const sum = (calls: Record<string, number>) => Object.values(calls).reduce((x, y) => x + y, 0);
        sample.storeCalls = sum(after.counts[variant]!.calls) - sum(before.counts[variant]!.calls);
        sample.backendCalls = after.counts[variant]!.backend - before.counts[variant]!.backend;
        if (onRedis && redis) sample.serverCommands = (await redisScriptCalls(redis)) - serverBefore;
      }
      return sample;
    };

    // Warm-up: every route once, so JIT compilation and pool connections are not measured.
    const warm = Math.min(0.5, options.duration / 2);
    await cannon(app.port, { path: '/bare', key: 'unique', duration: warm }, options.connections);
    await cannon(app.port, { path: '/interceptor', key: 'unique', duration: warm }, options.connections);
    for (const s of [...app.stores, ...app.floors]) {
      await cannon(app.port, { path: `/${s}/first`, key: 'unique', duration: warm }, options.connections);
      await cannon(app.port, { path: `/${s}/first`, key: `warm-${runId}`, duration: warm }, options.connections);
    }

    for (let round = 0; round < options.rounds; round++) {
      const runBare = async (duration: number, connections?: number) => {
        const sample = await measure('bare', '/bare', 'unique', duration, connections);
        // The saturated bare runs describe the bare handler; the few-connection ones only pair with the latency case.
        (connections === undefined ? allBare : fewBare).push(sample);
        return sample;
      };
      let bareBefore = await runBare(options.duration);
      for (const c of httpCases) {
        const connections = c === 'latency' ? options.latencyConnections : undefined;
        // The latency case compares with the bare handler on as few connections.
        if (connections !== undefined) bareBefore = await runBare(options.duration, connections);
        for (const v of variants(c)) {
          const duration = c === 'conflict' ? conflictSeconds : options.duration;
          const path = v === 'interceptor' ? '/interceptor' : c === 'conflict' ? `/${v}/slow` : `/${v}/first`;
          const key = c === 'first' || c === 'latency' ? 'unique' : `${c}-${runId}-${platform}-${round}`;
          if (c === 'replay') await storeReplayed(app.port, path, key);
          const sample = await measure(v, path, key, duration, connections);
          log(
            `  ${platform} round ${round + 1} ${c.padEnd(8)} ${v.padEnd(11)} ${fmt(sample.rps, 0).padStart(6)} req/s  p50 ${fmt(sample.p50)} ms  p99 ${fmt(sample.p99)} ms  ` +
              `cpu ${fmt(sample.cpuMicrosPerRequest, 0)} µs/req  (bare before: ${fmt(bareBefore.rps, 0)} req/s, ${fmt(bareBefore.cpuMicrosPerRequest, 0)} µs/req)` +
              `${sample.non2xx ? `  non-2xx ${sample.non2xx}` : ''}`,
          );
          const series = connections === undefined ? allBare : fewBare;
          const entry: Entry = { sample, series, before: series.lastIndexOf(bareBefore) };
          bareBefore = await runBare(duration, connections);
          const id = `${c}:${v}`;
          (samples.get(id) ?? samples.set(id, []).get(id)!).push(entry);
        }
      }
    }

    const result: PlatformResult = {
      bare: {
        rps: Math.round(median(allBare.map((b) => b.rps))),
        p50Ms: round(median(allBare.map((b) => b.p50))),
        p99Ms: round(median(allBare.map((b) => b.p99))),
        cpuMicrosPerRequest: round(median(allBare.map((b) => b.cpuMicrosPerRequest!)), 1),
        rounds: allBare.map(roundSample),
      },
      cases: {},
    };
    for (const c of httpCases) {
      const byVariant: Partial<Record<Variant, CaseSummary>> = {};
      for (const v of variants(c)) {
        const entries = samples.get(`${c}:${v}`) ?? [];
        const ratio = (pick: (r: RunSample) => number) => round(median(entries.map((e) => pick(e.sample) / baselineOf(e, pick))), 3);
        const perRequest = (pick: (r: RunSample) => number | undefined) =>
          round(median(entries.map((e) => (pick(e.sample) ?? 0) / e.sample.requests)), 2);
        const cpu = (r: RunSample) => r.cpuMicrosPerRequest!;
        byVariant[v] = {
          rps: Math.round(median(entries.map((e) => e.sample.rps))),
          p50Ms: round(median(entries.map((e) => e.sample.p50))),
          p99Ms: round(median(entries.map((e) => e.sample.p99))),
          rpsRatio: ratio((r) => r.rps),
          p50Ratio: ratio((r) => r.p50),
          p99Ratio: ratio((r) => r.p99),
          addedP99Ms: round(median(entries.map((e) => e.sample.p99 - baselineOf(e, (r) => r.p99)))),
          addedP50Ms: round(median(entries.map((e) => e.sample.p50 - baselineOf(e, (r) => r.p50))), 3),
          cpuMicrosPerRequest: round(median(entries.map((e) => cpu(e.sample))), 1),
          addedCpuMicrosPerRequest: round(median(entries.map((e) => cpu(e.sample) - baselineOf(e, cpu))), 1),
          ...(!isStore(v)
            ? {}
            : {
                storeCallsPerRequest: perRequest((r) => r.storeCalls),
                backendCallsPerRequest: perRequest((r) => r.backendCalls),
                ...(v === 'redis' || v === 'redisNear' ? { serverCommandsPerRequest: perRequest((r) => r.serverCommands) } : {}),
              }),
          non2xx: entries.reduce((x, e) => x + e.sample.non2xx, 0),
          errors: entries.reduce((x, e) => x + e.sample.errors, 0),
          rounds: entries.map((e) => roundSample(e.sample)),
          rpsRatioRounds: entries.map((e) => round(e.sample.rps / baselineOf(e, (r) => r.rps), 3)),
          addedP99MsRounds: entries.map((e) => round(e.sample.p99 - baselineOf(e, (r) => r.p99))),
        };
      }
      for (const v of Object.keys(byVariant) as Variant[]) {
        if (isStore(v)) byVariant[v]!.vsFloor = compareWithFloor(byVariant[v]!, FLOOR_OF[v], byVariant[FLOOR_OF[v]]);
      }
      result.cases[c] = byVariant;
    }
    return result;
  } finally {
    await redis?.quit().catch(() => undefined);
    await app.close();
  }
}

/** One timed run of a case, and where it sits among the bare runs of its connection count. */
export interface Entry {
  sample: RunSample;
  /** The bare runs on the same number of connections, in the order they ran. */
  series: RunSample[];
  /** Index in `series` of the bare run just before this one (the one just after is `before + 1`). */
  before: number;
}

/**
 * How many bare runs on each side of a timed run make its baseline. Two (the runs just
 * before and after) let the noise of one bare run, as large as a store's whole cost on
 * Express (±15 µs of app CPU per request on this 2-core machine, where the load
 * generator shares the cores), decide a ratio of two small added costs; six still follow
 * drift that lasts a few cases, and their median ignores one run disturbed by the machine.
 */
export const BASELINE_SIDE = 3;

/** The bare figure a timed run is compared with: the median of the `BASELINE_SIDE` bare runs on each side of it. */
export function baselineOf(entry: Entry, pick: (r: RunSample) => number): number {
  const from = Math.max(0, entry.before - BASELINE_SIDE + 1);
  return median(entry.series.slice(from, entry.before + 1 + BASELINE_SIDE).map(pick));
}

/**
 * The stores and floors in the order they run: each floor right after the first library
 * store it is the floor of (the stores are listed main one first: Redis before its near
 * cache and node-redis, TypeORM before Prisma and Drizzle), so that pair sees the same
 * drift of the machine.
 */
export function measureOrder(stores: readonly StoreName[], floors: readonly FloorName[]): Variant[] {
  const order: Variant[] = [];
  for (const store of stores) {
    order.push(store);
    const floor = FLOOR_OF[store];
    if (floors.includes(floor) && !order.includes(floor)) order.push(floor);
  }
  return [...order, ...floors.filter((f) => !order.includes(f))];
}

/** A library case against its floor's figures of the same case (undefined when the floor did not run). */
export function compareWithFloor(library: CaseSummary, floor: FloorName, figures: CaseSummary | undefined): FloorComparison | undefined {
  if (!figures) return undefined;
  const ratio = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined || !(Math.abs(b) > 0) ? Number.NaN : round(a / b, 3);
  return {
    floor,
    rpsRatio: ratio(library.rps, figures.rps),
    addedCpuRatio: ratio(library.addedCpuMicrosPerRequest, figures.addedCpuMicrosPerRequest),
    p50Ratio: ratio(library.p50Ms, figures.p50Ms),
    p99Ratio: ratio(library.p99Ms, figures.p99Ms),
    addedP50Ratio: ratio(library.addedP50Ms, figures.addedP50Ms),
  };
}

function roundSample(s: RunSample): RunSample {
  return {
    ...s,
    rps: Math.round(s.rps),
    p50: round(s.p50),
    p99: round(s.p99),
    cpuMicrosPerRequest: round(s.cpuMicrosPerRequest ?? Number.NaN, 1),
  };
}

export async function runBench(
  options: BenchOptions,
  log: (line: string) => void = (l) => process.stderr.write(l + '\n'),
): Promise<BenchResult> {
  const runId = randomBytes(4).toString('hex');
  const missing = ALL_STORES.filter((s) => !options.stores.includes(s));
  if (missing.length) log(`Stores left out: ${missing.join(', ')}`);
  const { out: _out, ...shown } = options;
  const result: BenchResult = {
    generatedAt: new Date().toISOString(),
    lib: describeLib(),
    machine: { ...machineInfo(), ...(options.gauge === false ? {} : { gaugeMs: { start: await speedGauge() } }) },
    options: shown,
    http: {},
    targets: [],
  };
  for (const platform of options.platforms) {
    log(`HTTP on ${platform}: stores ${options.stores.join(', ')}`);
    result.http[platform] = await runPlatform(platform, options, runId, log);
  }
  if (result.machine.gaugeMs) result.machine.gaugeMs.end = await speedGauge();
  result.targets = checkTargets(result);
  return result;
}

/** Writes a run's JSON, its report and (for the default output) docs/performance.md's tables and the charts. */
async function publish(result: BenchResult, options: BenchOptions): Promise<void> {
  const report = markdownReport(result);
  writeRun(options.out, options.from ? undefined : result, report + '\n');
  process.stdout.write('\n' + report + '\n');
  if (options.updateDocs && options.out === DEFAULT_OUT) {
    updateDocs(markdownReport(result, { docs: true }));
    // The charts of docs/performance.md, drawn from bench/results/*.json (bench/chart.ts).
    await writeCharts(join(ROOT, 'bench', 'results'), join(ROOT, 'docs', 'images'));
  }
}

if (require.main === module) {
  runMain(async () => {
    const options = parseArgs(process.argv.slice(2));
    const started = Date.now();
    if (options.from) options.out = options.from;
    const result = options.from ? (JSON.parse(readFileSync(options.from, 'utf8')) as BenchResult) : await runBench(options);
    await publish(result, options);
    process.stderr.write(`Wrote ${options.out} in ${Math.round((Date.now() - started) / 1000)} s\n`);
  });
}
