/**
 * What idempotency costs, per store, against the bare handler, in one run:
 *
 *   npm run bench                                   # Express then Fastify, ~5 min
 *   npm run bench -- --platform express --duration 1 --rounds 1   # a quick look
 *   BENCH_LIB=/tmp/before/lib npm run bench         # the same against another copy of lib/
 *
 * The app runs in a child process (bench/app.ts); autocannon drives it from this
 * process. Runs are interleaved (bare, store A, bare, floor of A, bare, store B, ..., bare)
 * and every store figure is compared with the median of the six bare runs around it
 * (`baselineOf`), so drift of a shared machine cancels out; the report gives medians over
 * rounds.
 */
import autocannon from 'autocannon';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { parseFlags, sharedFlags } from './args.js';
import { forkReady, IpcChild, replaceBetweenMarkers, ROOT, runChild } from './harness.js';
import type { AppConfig, ChildMessage, ParentMessage } from './app.js';
import type { FunctionsResult } from './functions.js';
import type { MemoryBoundResult } from './memory-bound.js';
import { median, round } from './stats.js';
import { describeLib } from './lib.js';
import { ALL_STORES, SQL_STORES, storeModuleReady, type StoreName } from './stores.js';
import type { FloorName } from './floors.js';
import { writeCharts } from './chart.js';
import { speedGauge } from './gauge.js';

export type Platform = 'express' | 'fastify';
export type HttpCase = 'first' | 'replay' | 'conflict' | 'latency';
const HTTP_CASES: readonly HttpCase[] = ['first', 'replay', 'conflict', 'latency'];
export type CaseName = HttpCase | 'functions' | 'memory';
const ALL_CASES: readonly CaseName[] = [...HTTP_CASES, 'functions', 'memory'];

export interface BenchOptions {
  /** @default ['express', 'fastify'] */
  platforms: Platform[];
  /** Seconds per timed run (first execution and replay; conflict runs half as long, at least 1 s). @default 2 */
  duration: number;
  /** @default 5 */
  rounds: number;
  /** @default 50 */
  connections: number;
  /**
   * Connections of the latency case: first executions from so few connections that
   * requests do not queue, so the added latency is the store's and not queueing.
   * (autocannon's fixed-rate mode sends in bursts once a second, which queues too.)
   * @default 1
   */
  latencyConnections: number;
  /** @default every store whose module exists */
  stores: StoreName[];
  /** @default every case */
  cases: CaseName[];
  /** ioredis enableAutoPipelining. @default false (ioredis's default) */
  autoPipelining: boolean;
  /** @default $REDIS_URL or 'redis://127.0.0.1:6379' */
  redisUrl: string;
  /** @default $DATABASE_URL or 'postgres://postgres@127.0.0.1:5432/test' */
  postgresUrl: string;
  /** @default $MYSQL_URL or 'mysql://root@127.0.0.1:3306/test' (MariaDB or MySQL) */
  mariadbUrl: string;
  /** Where the JSON goes. @default bench/results/latest.json */
  out: string;
  /** Unique keys pushed through the memory store for the RSS figure. @default 100000 */
  memoryKeys: number;
  /** @default 10000 */
  memoryMaxEntries: number;
  /** Replace the table in docs/performance.md (only when `out` is the default). @default true */
  updateDocs: boolean;
  /** Time `speedGauge()` (bench/gauge.ts) at the start and end of the run; the harness's test leaves it out. @default true */
  gauge?: boolean;
  /** Directory for V8 CPU profiles of the app process (`node --cpu-prof`); none when unset. */
  cpuProfileDir?: string;
  /** Measure nothing: write the report, docs/performance.md's tables and the charts again from this saved run (`--from bench/results/latest.json`). */
  from?: string;
}

/** One autocannon run, reduced to what the report needs. */
export interface RunSample {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
  /** CPU time of the app process per request sent, µs (user + system). */
  cpuMicrosPerRequest?: number;
  storeCalls?: number;
  backendCalls?: number;
  serverCommands?: number;
}

/**
 * A decorated route: one per store, the floor of the stores that have one (bench/floors.ts),
 * and a no-op interceptor as the floor of any interceptor.
 */
export type Variant = StoreName | FloorName | 'interceptor';

/** The floor each library store is measured against (the same kind of client or pool, the same database). */
export const FLOOR_OF: Record<StoreName, FloorName> = {
  memory: 'floor-memory',
  redis: 'floor-redis',
  redisNear: 'floor-redis',
  'node-redis': 'floor-redis',
  typeorm: 'floor-postgres',
  prisma: 'floor-postgres',
  drizzle: 'floor-postgres',
  mariadb: 'floor-mariadb',
};

/** A library case divided by its floor's in the same case and rounds. */
export interface FloorComparison {
  floor: FloorName;
  /** library req/s ÷ floor req/s (medians). */
  rpsRatio: number;
  /** library added app CPU µs/request ÷ the floor's (medians over rounds, each above its bare runs). */
  addedCpuRatio: number;
  p50Ratio: number;
  p99Ratio: number;
  /** library added p50 ÷ the floor's (p50 above the bare runs around each). */
  addedP50Ratio: number;
}

export interface CaseSummary {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Medians over rounds of store ÷ its baseline (the median of the six bare runs around it, `baselineOf`). */
  rpsRatio: number;
  p50Ratio: number;
  p99Ratio: number;
  /** Median over rounds of store p99 − bare p99, ms. */
  addedP99Ms: number;
  /** Median over rounds of store p50 − bare p50, ms. */
  addedP50Ms?: number;
  /** This case against its store's floor (library stores only, when the floor ran). */
  vsFloor?: FloorComparison;
  /** App process CPU per request, µs: less sensitive to a busy machine than req/s. */
  cpuMicrosPerRequest: number;
  /** Median over rounds of store CPU/request − bare CPU/request, µs. */
  addedCpuMicrosPerRequest: number;
  /** Calls to the IdempotencyStore per request sent, counted by a wrapper. */
  storeCallsPerRequest?: number;
  /** Commands (Redis) or queries (PostgreSQL) sent by the backend client per request, counted at the client. */
  backendCallsPerRequest?: number;
  /** Redis only: EVAL + EVALSHA calls per request from INFO commandstats deltas (the server is shared: an upper bound). */
  serverCommandsPerRequest?: number;
  /** Each round's req/s ratio and added p99 (ms), for the spread behind the medians (absent in older runs). */
  rpsRatioRounds?: number[];
  addedP99MsRounds?: number[];
  /** Non-2xx answers over all rounds (the conflict case expects 409s). */
  non2xx: number;
  errors: number;
  rounds: RunSample[];
}

export interface PlatformResult {
  bare: { rps: number; p50Ms: number; p99Ms: number; cpuMicrosPerRequest: number; rounds: RunSample[] };
  cases: Partial<Record<HttpCase, Partial<Record<Variant, CaseSummary>>>>;
}

export interface BenchResult {
  generatedAt: string;
  /** Which lib was measured (see BENCH_LIB in bench/lib.ts); absent in runs from before it was recorded. */
  lib?: string;
  machine: {
    node: string;
    cpus: number;
    cpuModel: string;
    loadAverageAtStart: number[];
    /** `speedGauge()` ms at the start and at the end of the run (bench/gauge.ts); absent in older runs. */
    gaugeMs?: { start: number; end?: number };
  };
  options: Omit<BenchOptions, 'out'>;
  http: Partial<Record<Platform, PlatformResult>>;
  functions?: FunctionsResult;
  memory?: { bounded: MemoryBoundResult; unbounded: MemoryBoundResult };
  targets: TargetCheck[];
}

export interface TargetCheck {
  name: string;
  target: string;
  measured: string;
  met: boolean;
}

const DEFAULT_OUT = join(ROOT, 'bench', 'results', 'latest.json');
const BENCH_LIB_OUT = join(ROOT, '.tmp', 'bench-lib.json');
const DOCS_START = '<!-- bench:results:start -->';
const DOCS_END = '<!-- bench:results:end -->';

/** Puts the report between the markers of docs/performance.md, so the doc shows the latest run. */
function updateDocs(report: string): void {
  if (replaceBetweenMarkers(DOCS_START, DOCS_END, report)) process.stderr.write(`Updated ${join(ROOT, 'docs', 'performance.md')}\n`);
}
/** Batches of unique keys pushed through the bounded memory store: enough to see RSS level off. */
const MEMORY_BATCHES = 5;
/** The stores on the bench's Redis, whose script calls are also counted on the server (INFO commandstats). */
const REDIS_STORES: readonly StoreName[] = ['redis', 'redisNear', 'node-redis'];
export const BODY = JSON.stringify({ amount: 4200, currency: 'eur', customer: 'cus_123', description: 'bench order' });

export function parseArgs(argv: string[]): BenchOptions {
  const options: BenchOptions = {
    platforms: ['express', 'fastify'],
    duration: 2,
    rounds: 5,
    connections: 50,
    latencyConnections: 1,
    stores: ALL_STORES.filter(storeModuleReady),
    cases: [...ALL_CASES],
    // ioredis's own default: auto-pipelining only costs CPU when each request sends its commands in its own I/O callback (docs/performance.md, "What we learned").
    autoPipelining: false,
    redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    postgresUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
    mariadbUrl: process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test',
    // Figures of another lib (BENCH_LIB) must not pass for this tree's: they go to a
    // git-ignored file, and the docs keep this tree's table.
    out: process.env.BENCH_LIB ? BENCH_LIB_OUT : DEFAULT_OUT,
    memoryKeys: 100_000,
    memoryMaxEntries: 10_000,
    updateDocs: !process.env.BENCH_LIB,
  };
  const list = (value: () => string) =>
    value()
      .split(',')
      .map((v) => v.trim())
      .filter(Boolean);
  parseFlags(argv, {
    ...sharedFlags(options),
    '--platform': (value) => (options.platforms = list(value).flatMap((p) => (p === 'both' ? ['express', 'fastify'] : [p])) as Platform[]),
    '--latency-connections': (value) => (options.latencyConnections = Number(value())),
    '--stores': (value) => (options.stores = list(value) as StoreName[]),
    '--cases': (value) => (options.cases = list(value) as CaseName[]),
    '--postgres-url': (value) => (options.postgresUrl = value()),
    '--mariadb-url': (value) => (options.mariadbUrl = value()),
    '--no-auto-pipelining': () => (options.autoPipelining = false),
    '--memory-keys': (value) => (options.memoryKeys = Number(value())),
    '--memory-max-entries': (value) => (options.memoryMaxEntries = Number(value())),
    '--from': (value) => (options.from = resolve(value())),
    '--cpu-prof': (_value, inline) => (options.cpuProfileDir = resolve(inline ?? join(ROOT, 'bench', 'results', 'profiles'))),
    '--help': () => {
      process.stdout.write(
        'npm run bench -- [--platform express|fastify|both] [--duration s] [--rounds n] [--connections n] [--latency-connections n]\n' +
          '  [--stores memory,redis,redisNear,typeorm,mariadb,prisma,drizzle,node-redis] [--cases first,replay,conflict,latency,functions,memory] [--auto-pipelining] [--out file] [--from saved.json]\n' +
          '  [--cpu-prof[=dir]]   profile the app process (open the .cpuprofile in Chrome DevTools)\n' +
          '  [--no-docs]          leave docs/performance.md alone\n' +
          'BENCH_LIB=/path/to/another/lib npm run bench ...   measure another copy of lib/ (a git worktree of an older commit);\n' +
          '  writes .tmp/bench-lib.json (and .md) unless --out, never the docs\n' +
          '  [--redis-url url] [--postgres-url url] [--mariadb-url url]   servers of the Redis (ioredis, node-redis) and SQL stores\n',
      );
      process.exit(0);
    },
  });
  for (const p of options.platforms) if (p !== 'express' && p !== 'fastify') throw new Error(`--platform: unknown platform ${p}`);
  for (const s of options.stores) if (!ALL_STORES.includes(s)) throw new Error(`--stores: unknown store ${s}`);
  for (const c of options.cases) if (!ALL_CASES.includes(c)) throw new Error(`--cases: unknown case ${c}`);
  if (!(options.duration > 0) || !(options.rounds >= 1) || !(options.connections >= 1) || !(options.latencyConnections >= 1)) {
    throw new Error('--duration, --rounds, --connections and --latency-connections must be positive numbers.');
  }
  return options;
}

/** The app under load, in its own process, with a request/response channel over IPC. */
export class AppProcess extends IpcChild<ChildMessage> {
  private constructor(
    child: ChildProcess,
    readonly port: number,
    readonly stores: StoreName[],
    readonly floors: FloorName[],
  ) {
    super(child);
  }

  static async start(config: AppConfig, cpuProfileDir?: string): Promise<AppProcess> {
    const { child, ready } = await forkReady<Extract<ChildMessage, { type: 'ready' }>>(join(__dirname, 'app.ts'), {
      name: 'bench app',
      execArgv: cpuProfileDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfileDir] : [],
      env: { ...process.env, BENCH_APP_CONFIG: JSON.stringify(config) },
    });
    return new AppProcess(child, ready.port, ready.stores, ready.floors ?? []);
  }

  request<T extends ChildMessage>(
    message: ParentMessage extends infer M ? (M extends unknown ? Omit<M, 'id'> : never) : never,
  ): Promise<T> {
    return this.ask<T>(message);
  }

  async counts(): Promise<Extract<ChildMessage, { type: 'counts' }>> {
    return this.request({ type: 'counts' });
  }
}

/**
 * Store counts once the requests still in the server when autocannon stopped have
 * finished (they were sent, so they count): polled until two reads agree.
 */
export async function settledCounts(app: AppProcess): Promise<Extract<ChildMessage, { type: 'counts' }>> {
  let last = await app.counts();
  for (let i = 0; i < 40; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const next = await app.counts();
    if (JSON.stringify(next.counts) === JSON.stringify(last.counts)) return next;
    last = next;
  }
  return last;
}

/** EVAL/EVALSHA calls the Redis server executed so far (shared server: other clients add to it). */
async function redisScriptCalls(redis: import('ioredis').Redis): Promise<number> {
  const info = await redis.info('commandstats');
  let total = 0;
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) total += Number(match[2]);
  return total;
}

export interface Target {
  path: string;
  /** 'unique' gives every request a new key; otherwise the fixed key sent with each request. */
  key: 'unique' | string | undefined;
  duration: number;
}

export interface CannonResult {
  result: autocannon.Result;
  /** Every response time, ms at hrtime resolution (autocannon's histogram keeps whole ms and 2xx only). */
  latencies: Float64Array;
}

export function cannon(port: number, target: Target, connections: number): Promise<CannonResult> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const unique = target.key === 'unique';
  if (target.key && !unique) headers['idempotency-key'] = target.key;
  const prefix = randomBytes(6).toString('hex');
  let n = 0;
  let latencies = new Float64Array(65_536);
  let count = 0;
  return new Promise((resolvePromise, reject) => {
    const instance = autocannon(
      {
        url: `http://127.0.0.1:${port}`,
        connections,
        duration: target.duration,
        requests: [
          {
            method: 'POST',
            path: target.path,
            headers,
            body: BODY,
            // A new key per request: every request is a first execution.
            ...(unique
              ? {
                  setupRequest: (request: autocannon.Request) => ({
                    ...request,
                    headers: { ...headers, 'idempotency-key': `${prefix}-${++n}` },
                  }),
                }
              : {}),
          },
        ],
      },
      (error, result) => (error ? reject(error) : resolvePromise({ result, latencies: latencies.subarray(0, count) })),
    );
    instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTime: number) => {
      if (count === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[count++] = responseTime;
    });
  });
}

/** The p-th percentile (0–100) of unsorted values, nearest rank. */
export function percentile(values: Float64Array, p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function sampleOf({ result, latencies }: CannonResult): RunSample {
  return {
    rps: result.requests.total / result.duration,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    // The requests still in the server when autocannon stops were sent and are served: they count.
    requests: result.requests.sent,
    non2xx: result.non2xx,
    errors: result.errors,
  };
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
      const after = await settledCounts(app);
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
          if (c === 'replay') {
            // Store the one result first, so the timed run is all replays.
            await fetch(`http://127.0.0.1:${app.port}${path}`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'idempotency-key': key },
              body: BODY,
            });
          }
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

export function checkTargets(result: BenchResult): TargetCheck[] {
  const checks: TargetCheck[] = [];
  for (const [platform, r] of Object.entries(result.http) as [Platform, PlatformResult][]) {
    const ratio = (c: HttpCase, s: StoreName, name: string, min: number) => {
      const v = r.cases[c]?.[s]?.rpsRatio;
      if (v !== undefined)
        checks.push({
          name: `${platform}: ${name}`,
          target: `≥ ${min.toFixed(2)} × bare req/s`,
          measured: `${v.toFixed(2)}`,
          met: v >= min,
        });
    };
    // The targets of the third round of work (issue 19), per platform.
    const express = platform === 'express';
    ratio('first', 'memory', 'memory first execution', express ? 0.85 : 0.8);
    if (express) ratio('replay', 'memory', 'memory replay', 0.92);
    if (!express) ratio('first', 'redis', 'Redis first execution', 0.65);
    ratio('replay', 'redis', 'Redis replay', express ? 0.92 : 0.85);
    if (express) ratio('first', 'typeorm', 'PostgreSQL first execution', 0.45);
    const addedP99 = (c: HttpCase, name: string) => {
      const added = r.cases[c]?.redis?.addedP99Ms;
      if (added !== undefined)
        checks.push({
          name: `${platform}: Redis added p99, ${name}`,
          target: '< 1 ms',
          measured: `${added.toFixed(2)} ms`,
          met: added < 1,
        });
    };
    addedP99(
      'latency',
      `first execution, ${result.options.latencyConnections} connection${result.options.latencyConnections === 1 ? '' : 's'} (no queueing)`,
    );
    checks.push(...floorTargets(platform, r, result.options.latencyConnections));
  }
  if (result.memory) {
    const b = result.memory.bounded;
    const first = b.afterBatches[0];
    const last = b.afterBatches[b.afterBatches.length - 1];
    const maxRss = Math.max(...b.afterBatches.map((s) => s.rssMB));
    // RSS lags the heap (V8 keeps freed pages for reuse), so "bounded" is: entries capped,
    // heap flat after the first batch, and RSS no longer growing over the later batches.
    const rssOfLaterHalf = Math.max(...b.afterBatches.slice(Math.ceil(b.afterBatches.length / 2)).map((s) => s.rssMB));
    const rssOfEarlierHalf = Math.max(...b.afterBatches.slice(0, Math.ceil(b.afterBatches.length / 2)).map((s) => s.rssMB));
    const bounded =
      b.afterBatches.every((s) => s.entries <= b.maxEntries) &&
      last.heapUsedMB <= first.heapUsedMB * 1.25 + 2 &&
      rssOfLaterHalf <= rssOfEarlierHalf * 1.1;
    checks.push({
      name: `memory store with maxEntries ${b.maxEntries}, ${b.afterBatches.length} × ${b.keys} unique keys`,
      target: 'entries ≤ maxEntries, heap flat, RSS stops growing',
      measured: `${last.entries} entries, heap ${first.heapUsedMB} → ${last.heapUsedMB} MB, RSS ${b.before.rssMB} → at most ${maxRss} MB`,
      met: bounded,
    });
  }
  return checks;
}

/**
 * The targets of issue 32: each library store path within a ratio of its floor (added app
 * CPU per request, library ÷ floor), the Redis first execution's added p50 on few
 * connections within 1.2 × the floor's, and the near cache without a first-execution tax.
 */
export function floorTargets(platform: Platform, r: PlatformResult, latencyConnections: number): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const floorRatio = (c: HttpCase, s: StoreName, label: string, max: number) => {
    const v = r.cases[c]?.[s]?.vsFloor?.addedCpuRatio;
    if (v === undefined) return;
    checks.push({
      name: `${platform}: ${label} ${CASE_LABEL[c]}, added CPU ÷ floor`,
      target: `≤ ${max.toFixed(2)}`,
      measured: fmt(v),
      met: v <= max,
    });
  };
  for (const c of ['first', 'replay'] as const) {
    floorRatio(c, 'redis', 'Redis', 1.15);
    floorRatio(c, 'typeorm', 'PostgreSQL', 1.25);
    floorRatio(c, 'mariadb', 'MariaDB', 1.25);
    floorRatio(c, 'memory', 'memory', 1.3);
  }
  const p50 = r.cases.latency?.redis?.vsFloor?.addedP50Ratio;
  if (p50 !== undefined) {
    checks.push({
      name: `${platform}: Redis first execution on ${latencyConnections} connection(s), added p50 ÷ floor`,
      target: '≤ 1.20',
      measured: fmt(p50),
      met: p50 <= 1.2,
    });
  }
  // The near cache: first executions as dear as without it, replays near a memory replay.
  const near = (c: HttpCase, against: StoreName, label: string, max: number) => {
    const mine = r.cases[c]?.redisNear?.addedCpuMicrosPerRequest;
    const other = r.cases[c]?.[against]?.addedCpuMicrosPerRequest;
    if (mine === undefined || other === undefined) return;
    const v = mine / other;
    checks.push({ name: `${platform}: near cache, ${label}`, target: `≤ ${max.toFixed(2)}`, measured: fmt(v), met: v <= max });
  };
  near('first', 'redis', 'first execution added CPU ÷ without the near cache', 1.05);
  near('latency', 'redis', `first execution on ${latencyConnections} connection(s), added CPU ÷ without`, 1.05);
  near('replay', 'memory', 'replay added CPU ÷ a memory-store replay', 1.1);
  return checks;
}

/** The speed gauge of a run (bench/gauge.ts) for its header, or nothing for older runs. */
function gauge(result: BenchResult): string {
  const g = result.machine.gaugeMs;
  return g ? ` · speed gauge ${g.start}${g.end === undefined ? '' : ` → ${g.end}`} ms (about 50 on a quiet machine)` : '';
}

function fmt(value: number | undefined, digits = 2): string {
  return value === undefined || Number.isNaN(value) ? '–' : value.toFixed(digits);
}

const STORE_LABEL: Record<StoreName, string> = {
  memory: 'memory',
  redis: 'Redis',
  redisNear: 'Redis + near cache',
  typeorm: 'TypeORM/PostgreSQL',
  mariadb: 'TypeORM/MariaDB',
  prisma: 'Prisma/PostgreSQL',
  drizzle: 'Drizzle/PostgreSQL',
  'node-redis': 'Redis (node-redis)',
};
const VARIANT_LABEL: Record<Variant, string> = {
  ...STORE_LABEL,
  interceptor: 'no-op interceptor (no store)',
  'floor-memory': 'floor: memory by hand',
  'floor-redis': 'floor: Redis by hand',
  'floor-postgres': 'floor: PostgreSQL by hand',
  'floor-mariadb': 'floor: MariaDB by hand',
};
const CASE_LABEL: Record<HttpCase, string> = {
  first: 'first execution',
  replay: 'replay',
  conflict: 'in-flight conflict (409)',
  latency: 'first execution, few connections',
};

/**
 * The report of one run. `docs`: the HTTP tables only, for docs/performance.md (kept
 * short there); the makeIdempotent, memory-size and targets tables stay in the report
 * beside the JSON (bench/results/latest.md).
 */
export function markdownReport(result: BenchResult, { docs = false }: { docs?: boolean } = {}): string {
  const lines: string[] = [];
  const o = result.options;
  // The docs name the commit only (in the run line); the full description is in latest.md.
  const commit = result.lib ? /commit ([0-9a-f]{7,})/.exec(result.lib)?.[1] : undefined;
  if (result.lib && !docs) lines.push(`Library: ${result.lib}`, '');
  lines.push(
    `Run ${result.generatedAt}${docs && commit ? ` · lib/ at ${commit}` : ''} · Node ${result.machine.node} · ${result.machine.cpus} × ${result.machine.cpuModel} · load average at start ${result.machine.loadAverageAtStart.map((l) => l.toFixed(2)).join(' ')}${gauge(result)}`,
    `${o.connections} connections · ${o.duration} s per run (conflict ${Math.max(1, o.duration / 2)} s) · ${o.rounds} interleaved rounds · medians over rounds · ratios are to the median of the 6 bare runs around each (3 before, 3 after) · latency case on ${o.latencyConnections} connection(s) · ioredis auto-pipelining ${o.autoPipelining ? 'on' : 'off'}`,
    '',
  );
  if (docs) return docsSummary(result, lines);
  for (const [platform, r] of Object.entries(result.http) as [Platform, PlatformResult][]) {
    lines.push(`### HTTP, ${platform === 'express' ? 'Express' : 'Fastify'}`, '');
    lines.push(
      `Bare handler: ${r.bare.rps} req/s, p50 ${fmt(r.bare.p50Ms)} ms, p99 ${fmt(r.bare.p99Ms)} ms, ${fmt(r.bare.cpuMicrosPerRequest, 0)} µs app CPU per request.`,
      '',
    );
    lines.push(
      '| case | store | req/s | × bare | × floor | p50 ms | × bare | × floor | p99 ms | × bare | × floor | added p99 ms | app CPU µs/req | added CPU µs/req | × floor | store calls / req | backend calls / req |',
    );
    lines.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
    for (const [c, byVariant] of Object.entries(r.cases) as [HttpCase, Partial<Record<Variant, CaseSummary>>][]) {
      for (const [v, x] of Object.entries(byVariant) as [Variant, CaseSummary][]) {
        const backend =
          v === 'memory' || x.backendCallsPerRequest === undefined
            ? '–'
            : `${fmt(x.backendCallsPerRequest)}${x.serverCommandsPerRequest !== undefined ? ` (server: ${fmt(x.serverCommandsPerRequest)})` : ''}`;
        const f = x.vsFloor;
        lines.push(
          `| ${v === 'interceptor' ? 'reference' : c === 'latency' ? `first execution, ${o.latencyConnections} conn.` : CASE_LABEL[c]} | ${VARIANT_LABEL[v]} | ${x.rps} | **${fmt(x.rpsRatio)}** | ${fmt(f?.rpsRatio)} | ${fmt(x.p50Ms)} | ${fmt(x.p50Ratio)} | ${fmt(c === 'latency' ? f?.addedP50Ratio : f?.p50Ratio)} | ${fmt(x.p99Ms)} | ${fmt(x.p99Ratio)} | ${fmt(f?.p99Ratio)} | ${fmt(x.addedP99Ms)} | ` +
            `${fmt(x.cpuMicrosPerRequest, 0)} | ${fmt(x.addedCpuMicrosPerRequest, 0)} | **${fmt(f?.addedCpuRatio)}** | ${x.storeCallsPerRequest === undefined ? '–' : fmt(x.storeCallsPerRequest)} | ${backend} |`,
        );
      }
    }
    const anomalies = Object.entries(r.cases).flatMap(([c, byStore]) =>
      Object.entries(byStore ?? {})
        .filter(([, v]) => (c !== 'conflict' && v!.non2xx > 0) || v!.errors > 0)
        .map(([s, v]) => `${c}/${s}: ${v!.non2xx} non-2xx, ${v!.errors} errors`),
    );
    if (anomalies.length) lines.push('', `Unexpected answers: ${anomalies.join('; ')}.`);
    lines.push('');
  }
  if (result.functions) {
    lines.push('### makeIdempotent, no HTTP (50 concurrent callers)', '');
    lines.push('| store | case | calls/s | bare function calls/s | added µs per call | store calls / call |');
    lines.push('|---|---|--:|--:|--:|--:|');
    for (const [s, v] of Object.entries(result.functions) as [StoreName, NonNullable<FunctionsResult[StoreName]>][]) {
      for (const kind of ['first', 'replay'] as const) {
        const f = v[kind];
        lines.push(
          `| ${STORE_LABEL[s]} | ${kind === 'first' ? 'first execution' : 'replay'} | ${f.callsPerSecond} | ${f.bareCallsPerSecond} | ${fmt(f.addedMicrosPerCall)} | ${fmt(f.storeCallsPerCall)} |`,
        );
      }
    }
    lines.push('');
  }
  if (result.memory) {
    lines.push('### Memory store size under unique keys (makeIdempotent, RSS and heap after GC)', '');
    const { bounded, unbounded } = result.memory;
    const batches = bounded.afterBatches.map((_, i) => `after ${((i + 1) * bounded.keys) / 1000}k keys`);
    lines.push(`| maxEntries | before | ${batches.join(' | ')} |`);
    lines.push(`|--:|---|${batches.map(() => '---').join('|')}|`);
    const snap = (m: MemoryBoundResult['before']) => `${m.rssMB} MB RSS, ${m.heapUsedMB} MB heap, ${m.entries} entries`;
    for (const m of [bounded, unbounded]) {
      lines.push(
        `| ${m.maxEntries} | ${snap(m.before)} | ${batches.map((_, i) => (m.afterBatches[i] ? snap(m.afterBatches[i]) : '–')).join(' | ')} |`,
      );
    }
    lines.push('');
  }
  if (result.targets.length) {
    lines.push('### Targets', '');
    lines.push('| target | wanted | measured | met |');
    lines.push('|---|---|--:|---|');
    for (const t of result.targets) lines.push(`| ${t.name} | ${t.target} | ${t.measured} | ${t.met ? 'yes' : '**no**'} |`);
    lines.push('');
  }
  return lines.join('\n');
}

/**
 * docs/performance.md's tables: per platform one row per store, the three cases side by
 * side, each as the bare handler's throughput kept, the app CPU added per request and
 * that CPU ÷ the floor's (bench/floors.ts). The full tables, with latencies and call
 * counts, are in bench/results/latest.md.
 */
function docsSummary(result: BenchResult, lines: string[]): string {
  const floorOf = (x: CaseSummary | undefined) => (x?.vsFloor ? ` (×${fmt(x.vsFloor.addedCpuRatio)})` : '');
  const cell = (x: CaseSummary | undefined) => (x ? `**${fmt(x.rpsRatio)}** · +${fmt(x.addedCpuMicrosPerRequest, 0)}${floorOf(x)}` : '–');
  const latency = (x: CaseSummary | undefined) =>
    x?.addedP50Ms === undefined ? '–' : `+${fmt(x.addedP50Ms)} ms${x.vsFloor ? ` (×${fmt(x.vsFloor.addedP50Ratio)})` : ''}`;
  const platforms = Object.entries(result.http) as [Platform, PlatformResult][];
  const name = (platform: Platform) => (platform === 'express' ? 'Express' : 'Fastify');
  lines.push(
    `Bare handler: ${platforms.map(([p, r]) => `${name(p)} ${r.bare.rps} req/s, ${fmt(r.bare.cpuMicrosPerRequest, 0)} µs of app CPU per request`).join('; ')}. ` +
      "Each cell: the bare handler's throughput kept (**× bare**) · app CPU added per request, µs (× the floor's). Latency: p50 added to a first execution from 1 connection (× the floor's).",
    '',
    `| store | ${platforms.map(([p]) => `${name(p)}: first execution | ${name(p)}: replay`).join(' | ')} | latency, ${platforms.map(([p]) => name(p)).join(' / ')} |`,
    `|---|${platforms.map(() => '--:|--:|').join('')}--:|`,
  );
  const variants = new Set<Variant>();
  for (const [, r] of platforms)
    for (const byVariant of Object.values(r.cases)) for (const v of Object.keys(byVariant ?? {}) as Variant[]) variants.add(v);
  for (const v of variants) {
    if (v.startsWith('floor-')) continue;
    const cells = platforms.map(([, r]) => `${cell(r.cases.first?.[v])} | ${cell(r.cases.replay?.[v])}`);
    const latencies = platforms.map(([, r]) => latency(r.cases.latency?.[v])).join(' / ');
    lines.push(`| ${VARIANT_LABEL[v]} | ${cells.join(' | ')} | ${latencies} |`);
  }
  lines.push(
    '',
    "The full tables (p50, p99, calls per request, the floors' own rows) and the targets: `bench/results/latest.md` in the repository.",
  );
  return lines.join('\n');
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
    machine: {
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
      loadAverageAtStart: loadavg(),
      ...(options.gauge === false ? {} : { gaugeMs: { start: await speedGauge() } }),
    },
    options: shown,
    http: {},
    targets: [],
  };
  const httpCases = options.cases.some((c) => (HTTP_CASES as readonly string[]).includes(c));
  if (httpCases) {
    for (const platform of options.platforms) {
      log(`HTTP on ${platform}: stores ${options.stores.join(', ')}`);
      result.http[platform] = await runPlatform(platform, options, runId, log);
    }
  }
  if (options.cases.includes('functions')) {
    const stores = options.stores.filter((s) => !SQL_STORES.includes(s));
    log(`makeIdempotent without HTTP: ${stores.join(', ')}`);
    result.functions = await runChild<FunctionsResult>('functions.ts', {
      stores,
      durationMs: Math.round(Math.min(options.duration, 1) * 1000),
      rounds: options.rounds,
      concurrency: options.connections,
      runId,
      autoPipelining: options.autoPipelining,
      redisUrl: options.redisUrl,
    });
  }
  if (options.cases.includes('memory')) {
    log(`Memory store RSS: ${MEMORY_BATCHES} × ${options.memoryKeys} unique keys`);
    const bounded = await runChild<MemoryBoundResult>(
      'memory-bound.ts',
      { keys: options.memoryKeys, maxEntries: options.memoryMaxEntries, batches: MEMORY_BATCHES },
      ['--expose-gc'],
    );
    // For contrast, a store with room for every key (3 batches are enough to see it grow).
    const unbounded = await runChild<MemoryBoundResult>(
      'memory-bound.ts',
      { keys: options.memoryKeys, maxEntries: options.memoryKeys * 10, batches: 3 },
      ['--expose-gc'],
    );
    result.memory = { bounded, unbounded };
  }
  if (result.machine.gaugeMs) result.machine.gaugeMs.end = await speedGauge();
  result.targets = checkTargets(result);
  return result;
}

/** Writes a run's JSON, its report and (for the default output) docs/performance.md's tables and the charts. */
async function publish(result: BenchResult, options: BenchOptions): Promise<void> {
  const report = markdownReport(result);
  mkdirSync(dirname(options.out), { recursive: true });
  if (!options.from) writeFileSync(options.out, JSON.stringify(result, null, 2) + '\n');
  writeFileSync(options.out.replace(/\.json$/, '.md'), report + '\n');
  process.stdout.write('\n' + report + '\n');
  if (options.updateDocs && options.out === DEFAULT_OUT) {
    updateDocs(markdownReport(result, { docs: true }));
    // The charts of docs/performance.md, drawn from bench/results/*.json (bench/chart.ts).
    await writeCharts(join(ROOT, 'bench', 'results'), join(ROOT, 'docs', 'images'));
  }
}

if (require.main === module) {
  const options = parseArgs(process.argv.slice(2));
  const started = Date.now();
  if (options.from) options.out = options.from;
  const measured = options.from ? Promise.resolve(JSON.parse(readFileSync(options.from, 'utf8')) as BenchResult) : runBench(options);
  measured.then(
    async (result) => {
      await publish(result, options);
      process.stderr.write(`Wrote ${options.out} in ${Math.round((Date.now() - started) / 1000)} s\n`);
      process.exit(0);
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
