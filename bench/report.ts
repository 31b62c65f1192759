/**
 * What a run of `npm run bench` records (bench/results/latest.json) and how it is read:
 * the JSON's shape, the targets each run is checked against, the report beside the JSON
 * (bench/results/latest.md) and docs/performance.md's table.
 */
import type { FloorName } from './floors.js';
import type { RunSample } from './load.js';
import type { StoreName } from './stores.js';

export const PLATFORMS = ['express', 'fastify'] as const;
export type Platform = (typeof PLATFORMS)[number];
export type HttpCase = 'first' | 'replay' | 'conflict' | 'latency';
export const HTTP_CASES: readonly HttpCase[] = ['first', 'replay', 'conflict', 'latency'];
export const PLATFORM_LABEL: Record<Platform, string> = { express: 'Express', fastify: 'Fastify' };

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
  cases: HttpCase[];
  /** ioredis enableAutoPipelining. @default false (ioredis's default) */
  autoPipelining: boolean;
  /** @default DEFAULT_URLS of bench/args.ts (`REDIS_URL`, `DATABASE_URL`, `MYSQL_URL`) */
  redisUrl: string;
  postgresUrl: string;
  mariadbUrl: string;
  /** Where the JSON goes. @default bench/results/latest.json */
  out: string;
  /** Replace the table in docs/performance.md (only when `out` is the default). @default true */
  updateDocs: boolean;
  /** Time `speedGauge()` (bench/stats.ts) at the start and end of the run; the harness's test leaves it out. @default true */
  gauge?: boolean;
  /** Directory for V8 CPU profiles of the app process (`node --cpu-prof`); none when unset. */
  cpuProfileDir?: string;
  /** Measure nothing: write the report, docs/performance.md's tables and the charts again from this saved run (`--from bench/results/latest.json`). */
  from?: string;
}

/**
 * A decorated route: one per store, the floor of the stores that have one (bench/floors.ts),
 * and a no-op interceptor as the floor of any interceptor.
 */
export type Variant = StoreName | FloorName | 'interceptor';

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
    /** `speedGauge()` ms at the start and at the end of the run (bench/stats.ts); absent in older runs. */
    gaugeMs?: { start: number; end?: number };
  };
  options: Omit<BenchOptions, 'out'>;
  http: Partial<Record<Platform, PlatformResult>>;
  targets: TargetCheck[];
}

export interface TargetCheck {
  name: string;
  target: string;
  measured: string;
  met: boolean;
}

/**
 * The targets each run is checked against, per platform: issue 19's ratios to the bare
 * handler, and issue 32's to the floor (each library store path's added app CPU within a
 * ratio of its floor's, the Redis first execution's added p50 on few connections within
 * 1.2 × the floor's, the near cache without a first-execution tax). A target whose
 * figures the run lacks is left out.
 */
export function checkTargets(result: BenchResult): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const n = result.options.latencyConnections;
  for (const [platform, r] of Object.entries(result.http) as [Platform, PlatformResult][]) {
    type Met = (v: number) => boolean;
    const add = (name: string, value: number | undefined, target: string, met: Met, shown: (v: number) => string = fmt) => {
      if (value !== undefined) checks.push({ name: `${platform}: ${name}`, target, measured: shown(value), met: met(value) });
    };
    const atMost = (name: string, value: number | undefined, max: number) => add(name, value, `≤ ${max.toFixed(2)}`, (v) => v <= max);
    const twoDigits = (v: number) => v.toFixed(2);
    const rps = (c: HttpCase, s: StoreName, name: string, min: number) =>
      add(name, r.cases[c]?.[s]?.rpsRatio, `≥ ${min.toFixed(2)} × bare req/s`, (v) => v >= min, twoDigits);
    const express = platform === 'express';
    rps('first', 'memory', 'memory first execution', express ? 0.85 : 0.8);
    if (express) rps('replay', 'memory', 'memory replay', 0.92);
    if (!express) rps('first', 'redis', 'Redis first execution', 0.65);
    rps('replay', 'redis', 'Redis replay', express ? 0.92 : 0.85);
    if (express) rps('first', 'typeorm', 'PostgreSQL first execution', 0.45);
    const latencyCase = `first execution, ${n} connection${n === 1 ? '' : 's'} (no queueing)`;
    const ms = (v: number) => `${v.toFixed(2)} ms`;
    add(`Redis added p99, ${latencyCase}`, r.cases.latency?.redis?.addedP99Ms, '< 1 ms', (v) => v < 1, ms);
    for (const c of ['first', 'replay'] as const) {
      for (const [s, label, max] of FLOOR_BOUNDS)
        atMost(`${label} ${CASE_LABEL[c]}, added CPU ÷ floor`, r.cases[c]?.[s]?.vsFloor?.addedCpuRatio, max);
    }
    atMost(`Redis first execution on ${n} connection(s), added p50 ÷ floor`, r.cases.latency?.redis?.vsFloor?.addedP50Ratio, 1.2);
    // The near cache: first executions as dear as without it, replays near a memory replay.
    const near = (c: HttpCase, against: StoreName, label: string, max: number) => {
      const mine = r.cases[c]?.redisNear?.addedCpuMicrosPerRequest;
      const other = r.cases[c]?.[against]?.addedCpuMicrosPerRequest;
      atMost(`near cache, ${label}`, mine === undefined || other === undefined ? undefined : mine / other, max);
    };
    near('first', 'redis', 'first execution added CPU ÷ without the near cache', 1.05);
    near('latency', 'redis', `first execution on ${n} connection(s), added CPU ÷ without`, 1.05);
    near('replay', 'memory', 'replay added CPU ÷ a memory-store replay', 1.1);
  }
  return checks;
}

/** Issue 32's bound on each store's added app CPU ÷ its floor's, in the order the targets are listed. */
const FLOOR_BOUNDS = [
  ['redis', 'Redis', 1.15],
  ['typeorm', 'PostgreSQL', 1.25],
  ['mariadb', 'MariaDB', 1.25],
  ['memory', 'memory', 1.3],
] as const;

/** The speed gauge of a run (bench/stats.ts) for its header, or nothing for older runs. */
function gauge(result: BenchResult): string {
  const g = result.machine.gaugeMs;
  return g ? ` · speed gauge ${g.start}${g.end === undefined ? '' : ` → ${g.end}`} ms (about 50 on a quiet machine)` : '';
}

export function fmt(value: number | undefined, digits = 2): string {
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
 * short there); the floors' rows, latencies, call counts and the targets stay in the report
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
    lines.push(`### HTTP, ${PLATFORM_LABEL[platform]}`, '');
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
  const name = (platform: Platform) => PLATFORM_LABEL[platform];
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
