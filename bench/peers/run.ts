/**
 * This library beside @node-idempotency/nestjs 1.0.4, in the harness of bench/run.ts:
 *
 *   npm run bench:peers                                   # Express then Fastify, memory, Redis and Redis + near cache, ~12 min
 *   npm run bench:peers -- --platform express --stores redis --rounds 3
 *
 * The peer's peer range stops at NestJS 10, so both run on NestJS 11, installed into
 * bench/.scratch/peers from the committed lockfile of .ci/legs/peers (as the NestJS 11
 * test leg is). One app process per platform and store holds the bare handler, this
 * library's `@Idempotent()` and the peer's, on the same kind of store; runs are
 * interleaved (bare, ours, bare, peer, bare, ...; which side goes first alternates by
 * round) and each is divided by the mean of the bare runs around it. Store
 * `redisNear` is this library's Redis store with its near cache on, beside the peer on
 * plain Redis (it has no near cache): the report puts it in a column of the Redis row.
 * Not part of `npm test` or CI: it takes minutes and its figures are timings.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { DEFAULT_URLS, listOf, parseFlags, requirePositive, sharedFlags, type SharedOptions } from '../args.js';
import { writeCharts } from '../chart.js';
import { forkReady, IpcChild, machineInfo, replaceBetweenMarkers, ROOT, runMain, writeRun } from '../harness.js';
import { cannon, sampleOf, storeReplayed, type RunSample } from '../load.js';
import { describeLib } from '../lib.js';
import { PLATFORM_LABEL, PLATFORMS, type Platform } from '../report.js';
import { median, round } from '../stats.js';
import type { PeersAppConfig, PeersChildMessage } from './app.js';

type Store = 'memory' | 'redis' | 'redisNear';
const ALL_STORES: readonly Store[] = ['memory', 'redis', 'redisNear'];
type Case = 'first' | 'replay';
type Side = 'ours' | 'peer';

interface PeersOptions extends SharedOptions {
  platforms: Platform[];
  stores: Store[];
  cases: Case[];
  /** Re-render the report (and the docs) from this JSON of an earlier run, without running anything. */
  report?: string;
}

interface SideSummary {
  /** Median over rounds of req/s ÷ mean(bare before, bare after), then min and max. */
  rpsRatio: number;
  rpsRatioMin: number;
  rpsRatioMax: number;
  /** Median over rounds of app CPU µs per request above the bare runs around it. */
  addedCpuMicrosPerRequest: number;
  non2xx: number;
  errors: number;
  rounds: { rps: number; ratio: number; cpuMicrosPerRequest: number; bareRps: number }[];
}

export interface PeersResult {
  generatedAt: string;
  lib: string;
  nest: string;
  peer: string;
  machine: { node: string; cpus: number; cpuModel: string; loadAverageAtStart: number[] };
  options: Omit<PeersOptions, 'out'>;
  results: { platform: Platform; store: Store; case: Case; ours: SideSummary; peer: SideSummary }[];
}

const DEFAULT_OUT = join(ROOT, 'bench', 'results', 'peers.json');
const PEERS_DIR = process.env.BENCH_PEERS_DIR ? resolve(process.env.BENCH_PEERS_DIR) : join(ROOT, 'bench', '.scratch', 'peers');
const START = '<!-- bench:peers:start -->';
const END = '<!-- bench:peers:end -->';

export function parseArgs(argv: string[]): PeersOptions {
  const options: PeersOptions = {
    platforms: ['express', 'fastify'],
    stores: [...ALL_STORES],
    cases: ['first', 'replay'],
    duration: 2,
    rounds: 5,
    connections: 50,
    redisUrl: DEFAULT_URLS.redis,
    autoPipelining: false,
    out: DEFAULT_OUT,
    updateDocs: true,
  };
  parseFlags(argv, {
    ...sharedFlags(options, 'bench:peers'),
    '--platform': (value) => (options.platforms = listOf('--platform', value(), PLATFORMS)),
    '--stores': (value) => (options.stores = listOf('--stores', value(), ALL_STORES)),
    '--cases': (value) => (options.cases = listOf('--cases', value(), ['first', 'replay'] as const)),
    '--report': (value) => (options.report = resolve(value())),
  });
  requirePositive(options, ['duration', 'rounds', 'connections']);
  return options;
}

/** Installs NestJS 11 and the peer from .ci/legs/peers unless that lockfile is installed already. */
function installPeers(): void {
  if (process.env.BENCH_PEERS_DIR) return;
  execFileSync('bash', [join(ROOT, '.ci', 'legs', 'install.sh'), 'peers', PEERS_DIR], { stdio: ['ignore', 2, 2] });
}

/** The peers app (bench/peers/app.ts) in its own process: its port, versions, and its CPU time asked over IPC. */
async function startApp(config: PeersAppConfig) {
  const { child, ready } = await forkReady<Extract<PeersChildMessage, { type: 'ready' }>>(join(__dirname, 'app.ts'), {
    name: 'peers app',
    env: { ...process.env, BENCH_PEERS_CONFIG: JSON.stringify(config), BENCH_PEERS_DIR: PEERS_DIR },
  });
  const ipc = new IpcChild<PeersChildMessage>(child);
  const cpuMicros = async () => (await ipc.ask<Extract<PeersChildMessage, { type: 'cpu' }>>({ type: 'cpu' })).cpuMicros;
  return { ...ready, cpuMicros, close: () => ipc.close() };
}

interface Paired {
  sample: RunSample;
  bareBefore: RunSample;
  bareAfter: RunSample;
}

function summarize(pairs: Paired[]): SideSummary {
  const rounds = pairs.map(({ sample, bareBefore, bareAfter }) => {
    const bareRps = (bareBefore.rps + bareAfter.rps) / 2;
    const bareCpu = (bareBefore.cpuMicrosPerRequest! + bareAfter.cpuMicrosPerRequest!) / 2;
    return {
      rps: sample.rps,
      ratio: sample.rps / bareRps,
      cpu: sample.cpuMicrosPerRequest!,
      addedCpu: sample.cpuMicrosPerRequest! - bareCpu,
      bareRps,
    };
  });
  const ratios = rounds.map((r) => r.ratio);
  return {
    rpsRatio: round(median(ratios)),
    rpsRatioMin: round(Math.min(...ratios)),
    rpsRatioMax: round(Math.max(...ratios)),
    addedCpuMicrosPerRequest: round(median(rounds.map((r) => r.addedCpu)), 0),
    non2xx: pairs.reduce((n, p) => n + p.sample.non2xx, 0),
    errors: pairs.reduce((n, p) => n + p.sample.errors, 0),
    rounds: rounds.map((r) => ({
      rps: Math.round(r.rps),
      ratio: round(r.ratio),
      cpuMicrosPerRequest: round(r.cpu, 1),
      bareRps: Math.round(r.bareRps),
    })),
  };
}

async function runOne(
  platform: Platform,
  store: Store,
  options: PeersOptions,
  runId: string,
  log: (line: string) => void,
): Promise<{ app: { nest: string; peer: string }; results: PeersResult['results'] }> {
  const app = await startApp({
    platform,
    store,
    runId: `${runId}${platform[0]}${store === 'redisNear' ? 'n' : store[0]}`,
    redisUrl: options.redisUrl,
    autoPipelining: options.autoPipelining,
  });
  try {
    const measure = async (path: string, key: string) => {
      const before = await app.cpuMicros();
      const sample = sampleOf(await cannon(app.port, { path, key, duration: options.duration }, options.connections));
      // Requests still in the server when autocannon stopped were sent: let them finish.
      await new Promise((r) => setTimeout(r, 100));
      sample.cpuMicrosPerRequest = ((await app.cpuMicros()) - before) / sample.requests;
      return sample;
    };
    const paths: Record<Side, string> = { ours: '/ours/first', peer: '/peer/first' };
    const warm = Math.min(0.5, options.duration / 2);
    for (const path of ['/bare', paths.ours, paths.peer]) {
      await cannon(app.port, { path, key: 'unique', duration: warm }, options.connections);
      await cannon(app.port, { path, key: `warm-${runId}`, duration: warm }, options.connections);
    }
    const pairs = new Map<string, Paired[]>();
    for (let round = 0; round < options.rounds; round++) {
      let bareBefore = await measure('/bare', 'unique');
      const sides: Side[] = round % 2 === 0 ? ['ours', 'peer'] : ['peer', 'ours'];
      for (const c of options.cases) {
        for (const side of sides) {
          const key = c === 'first' ? 'unique' : `replay-${runId}-${platform}-${store}-${side}-${round}`;
          if (c === 'replay') await storeReplayed(app.port, paths[side], key);
          const sample = await measure(paths[side], key);
          const bareAfter = await measure('/bare', 'unique');
          log(
            `  ${platform} ${store} round ${round + 1} ${c.padEnd(6)} ${side}  ${Math.round(sample.rps)} req/s, ` +
              `${Math.round(sample.cpuMicrosPerRequest!)} µs/req (bare ${Math.round(bareBefore.rps)} → ${Math.round(bareAfter.rps)} req/s)` +
              `${sample.non2xx ? `  non-2xx ${sample.non2xx}` : ''}`,
          );
          const id = `${c}:${side}`;
          (pairs.get(id) ?? pairs.set(id, []).get(id)!).push({ sample, bareBefore, bareAfter });
          bareBefore = bareAfter;
        }
      }
    }
    return {
      app: { nest: app.nest, peer: app.peer },
      results: options.cases.map((c) => ({
        platform,
        store,
        case: c,
        ours: summarize(pairs.get(`${c}:ours`)!),
        peer: summarize(pairs.get(`${c}:peer`)!),
      })),
    };
  } finally {
    await app.close();
  }
}

/**
 * One row per platform and store (kept short: docs/performance.md shows it). The near
 * cache (`redisNear`) is a column of the Redis row, and the peer of that row is the one
 * measured beside plain Redis when there is one.
 */
export function peersReport(result: PeersResult): string {
  const ratio = (s: SideSummary) =>
    `${s.rpsRatio.toFixed(2)} (${s.rpsRatioMin.toFixed(2)}–${s.rpsRatioMax.toFixed(2)})${s.non2xx || s.errors ? ` ⚠ ${s.non2xx} non-2xx, ${s.errors} errors` : ''}`;
  const lines = [
    `Run ${result.generatedAt.slice(0, 16).replace('T', ' ')} UTC · NestJS ${result.nest} · @node-idempotency/nestjs ${result.peer} · Node ${result.machine.node} · ` +
      `${result.machine.cpus} CPUs, load ${result.machine.loadAverageAtStart.map((l) => l.toFixed(1)).join(' ')} · ` +
      `${result.options.connections} connections · ${result.options.duration} s × ${result.options.rounds} interleaved rounds · × bare: median (min–max) · ` +
      "near cache: this library's Redis store with `nearCache: true` · added app CPU µs/req",
    '',
    '| platform, store | first: this library | first: near cache | first: the peer | replay: this library | replay: near cache | replay: the peer | ' +
      'added CPU, first / replay: this library · near cache · the peer |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const rows: { platform: Platform; store: 'memory' | 'redis' }[] = [];
  for (const r of result.results) {
    const store = r.store === 'memory' ? 'memory' : 'redis';
    if (!rows.some((x) => x.platform === r.platform && x.store === store)) rows.push({ platform: r.platform, store });
  }
  for (const { platform, store } of rows) {
    const of = (s: Store, c: Case) => result.results.find((x) => x.platform === platform && x.store === s && x.case === c);
    const cells = (c: Case) => {
      const plain = of(store, c);
      const near = store === 'redis' ? of('redisNear', c) : undefined;
      const peer = (plain ?? near)?.peer;
      return {
        text: [plain ? ratio(plain.ours) : '–', near ? ratio(near.ours) : '–', peer ? ratio(peer) : '–'],
        cpu: [plain?.ours, near?.ours, peer].map((s) => s?.addedCpuMicrosPerRequest ?? '–'),
      };
    };
    const first = cells('first');
    const replay = cells('replay');
    const cpu = first.cpu.map((x, i) => `${x} / ${replay.cpu[i]}`).join(' · ');
    lines.push(
      `| ${PLATFORM_LABEL[platform]}, ${store === 'redis' ? 'Redis' : 'memory'} | ${first.text.join(' | ')} | ${replay.text.join(' | ')} | ${cpu} |`,
    );
  }
  return lines.join('\n');
}

function updateDocs(report: string): void {
  if (!replaceBetweenMarkers(START, END, report)) {
    process.stderr.write(`bench:peers: no ${START} … ${END} markers in docs/performance.md; left it alone\n`);
  }
}

async function main(): Promise<void> {
  const options = parseArgs(process.argv.slice(2));
  const log = (line: string) => process.stderr.write(line + '\n');
  if (options.report) {
    const report = peersReport(JSON.parse(readFileSync(options.report, 'utf8')) as PeersResult);
    process.stdout.write(report + '\n');
    if (options.updateDocs) updateDocs(report);
    return;
  }
  installPeers();
  if (!existsSync(join(PEERS_DIR, 'node_modules', '@node-idempotency', 'nestjs'))) throw new Error(`no peers install at ${PEERS_DIR}`);
  const runId = `peers${randomBytes(3).toString('hex')}`;
  const { out: _out, ...shown } = options;
  const result: PeersResult = {
    generatedAt: new Date().toISOString(),
    lib: describeLib(),
    nest: '',
    peer: '',
    machine: machineInfo(),
    options: shown,
    results: [],
  };
  for (const platform of options.platforms) {
    for (const store of options.stores) {
      log(`${platform}, ${store}: this library and @node-idempotency/nestjs`);
      const { app, results } = await runOne(platform, store, options, runId, log);
      result.nest = app.nest;
      result.peer = app.peer;
      result.results.push(...results);
    }
  }
  const report = peersReport(result);
  writeRun(options.out, result, report + '\n');
  process.stdout.write('\n' + report + '\n');
  if (options.updateDocs && options.out === DEFAULT_OUT && !process.env.BENCH_LIB) {
    updateDocs(report);
    // The peers chart of the docs is drawn from this file (and the others from bench/results/latest.json);
    // the figures are saved already, so a chart that cannot be drawn is said, not fatal.
    await writeCharts(dirname(DEFAULT_OUT), join(ROOT, 'docs', 'images')).then(
      (files) => files.forEach((file) => log(`Wrote ${file}`)),
      (error: unknown) => log(`bench:peers: charts not redrawn: ${error instanceof Error ? error.message : String(error)}`),
    );
  }
}

if (require.main === module) runMain(main);
