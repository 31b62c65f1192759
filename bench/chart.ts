/**
 * The charts of docs/performance.md, drawn from the bench's own JSON with vega-lite:
 *
 *   npm run bench:chart                 # bench/results/{latest,peers}.json → docs/images/bench-*.svg
 *   npm run bench:chart -- --results dir --out dir
 *
 * `bench-ratios.svg`: the app CPU each store adds to a request over the bare handler,
 * first execution and replay, per platform: this library, its floor (the same handler
 * doing by hand the round trips the protocol needs: variants `floor-*` of
 * bench/run.ts, when the run has them) and the peer (bench/results/peers.json, where
 * it ran on the same store). Rendered headless (vega's SVG renderer needs no canvas), so a
 * run can redraw them. (The latency case's figures are the table's last column.)
 */
import { mkdirSync, readFileSync, existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseFlags } from './args.js';
import type { FloorName } from './floors.js';
import { ROOT, runMain } from './harness.js';
import type { PeersResult } from './peers/run.js';
import { PLATFORM_LABEL, type BenchResult, type Platform as PlatformKey, type PlatformResult } from './report.js';
import type { StoreName } from './stores.js';

type Series = 'this library' | 'floor (by hand)' | 'this library + near cache' | 'peer';

/** One bar of a chart. */
export interface Bar {
  platform: string;
  case: string;
  store: string;
  series: Series;
  value: number;
  /** Written above the bar: its value, rounded. */
  label: string;
  /** Written above the label where the chart compares: `×` this bar ÷ its reference bar. */
  ratio: string;
}

/** The stores the charts show, in order, with the floor variant of bench/run.ts that does their round trips by hand. */
const STORES: readonly { variant: StoreName; label: string; floor: FloorName }[] = [
  { variant: 'memory', label: 'memory', floor: 'floor-memory' },
  { variant: 'redis', label: 'Redis', floor: 'floor-redis' },
  { variant: 'redisNear', label: 'Redis + near', floor: 'floor-redis' },
  { variant: 'typeorm', label: 'PostgreSQL', floor: 'floor-postgres' },
  { variant: 'mariadb', label: 'MariaDB', floor: 'floor-mariadb' },
];
const CASE_LABEL: Record<string, string> = { first: 'first execution', replay: 'replay' };
const SERIES: readonly Series[] = ['this library', 'this library + near cache', 'floor (by hand)', 'peer'];
const COLORS: Record<Series, string> = {
  'this library': '#2f6fb3',
  'this library + near cache': '#8cb8e6',
  'floor (by hand)': '#9a9a9a',
  peer: '#e0862f',
};

/** A bar labelled with its value in whole µs, and with its ratio to `reference` (none where either is at or below zero: noise, not a ratio). */
function bar(base: Omit<Bar, 'series' | 'value' | 'label' | 'ratio'>, series: Series, value: number, reference?: number): Bar {
  const ratio = reference !== undefined && reference > 0 && value > 0 ? `×${(value / reference).toFixed(2)}` : '';
  return { ...base, series, value, label: Math.round(value).toFixed(0), ratio };
}

/** The bars of bench-ratios.svg: added app CPU µs per request of this library and its floor, per platform, case and store. */
export function cpuBars(latest: BenchResult): Bar[] {
  const bars: Bar[] = [];
  for (const [platform, result] of Object.entries(latest.http) as [PlatformKey, PlatformResult][]) {
    for (const c of ['first', 'replay'] as const) {
      const byVariant = result.cases[c];
      if (!byVariant) continue;
      for (const s of STORES) {
        const ours = byVariant[s.variant];
        if (!ours) continue;
        const base = { platform: PLATFORM_LABEL[platform], case: CASE_LABEL[c], store: s.label };
        const floor = byVariant[s.floor]?.addedCpuMicrosPerRequest;
        bars.push(bar(base, 'this library', ours.addedCpuMicrosPerRequest, floor));
        if (floor !== undefined) bars.push(bar(base, 'floor (by hand)', floor));
      }
    }
  }
  return bars;
}

/**
 * The bars of bench-peers.svg, all from one run of bench:peers (each side against the
 * bare runs around it in the same process): this library, its near cache (the
 * `redisNear` store, drawn in the Redis group) and the peer, labelled with the peer ÷ this library.
 */
export function peerBars(peers: PeersResult): Bar[] {
  const bars: Bar[] = [];
  for (const platform of ['express', 'fastify'] as const) {
    for (const c of ['first', 'replay']) {
      const of = (store: string) => peers.results.find((r) => r.platform === platform && r.store === store && r.case === c);
      for (const group of [
        { store: 'memory', label: 'memory' },
        { store: 'redis', label: 'Redis' },
      ]) {
        const plain = of(group.store);
        const near = group.store === 'redis' ? of('redisNear') : undefined;
        if (!plain && !near) continue;
        const base = { platform: PLATFORM_LABEL[platform], case: CASE_LABEL[c], store: group.label };
        const ours = plain?.ours.addedCpuMicrosPerRequest;
        if (ours !== undefined) bars.push(bar(base, 'this library', ours));
        if (near) bars.push(bar(base, 'this library + near cache', near.ours.addedCpuMicrosPerRequest));
        // The peer has no near cache: beside the near cache it runs on plain Redis.
        const peer = (plain ?? near)!.peer.addedCpuMicrosPerRequest;
        bars.push(bar(base, 'peer', peer, ours ?? near!.ours.addedCpuMicrosPerRequest));
      }
    }
  }
  return bars;
}

/** The subtitle lines that date a run and say its load. */
function runLines(command: string, run: BenchResult | PeersResult): string[] {
  const o = run.options;
  return [
    `${command}, ${run.generatedAt.slice(0, 16).replace('T', ' ')} UTC · Node ${run.machine.node} · ${run.machine.cpus} CPUs, ` +
      `load at start ${run.machine.loadAverageAtStart.map((l) => l.toFixed(1)).join(' ')}`,
    `${o.connections} connections · ${o.duration} s × ${o.rounds} interleaved rounds, medians · ` +
      'each bar against the bare handler measured just before and after it',
  ];
}

function floorLine(bars: Bar[]): string {
  return bars.some((b) => b.series === 'floor (by hand)')
    ? 'floor: the same handler doing by hand only the round trips the protocol needs · ×: this library ÷ its floor'
    : 'no floor variants in this run: each bar is the cost over the bare handler';
}

/** A vega-lite spec of grouped bars: stores on x, one bar per series, one panel per platform (and per case when `rows`). */
export function barSpec(bars: Bar[], title: string, subtitle: string[], yTitle: string, rows: boolean): Record<string, unknown> {
  const series = SERIES.filter((s) => bars.some((b) => b.series === s));
  const stores = STORES.map((s) => s.label).filter((l) => bars.some((b) => b.store === l));
  const header = { title: null, labelFontSize: 13, labelFontWeight: 'bold' };
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: title, subtitle, anchor: 'start', fontSize: 15, subtitleFontSize: 11, subtitleColor: '#555', offset: 12 },
    data: { values: bars },
    facet: {
      column: { field: 'platform', type: 'nominal', header },
      ...(rows ? { row: { field: 'case', type: 'nominal', sort: Object.values(CASE_LABEL), header } } : {}),
    },
    spec: {
      // Room for the store names under each group and a value over each bar.
      width: Math.max(300, stores.length * Math.max(90, series.length * 30)),
      height: 170,
      encoding: {
        x: { field: 'store', type: 'nominal', sort: stores, axis: { title: null, labelAngle: 0, labelFontSize: 11, labelPadding: 6 } },
        xOffset: { field: 'series', type: 'nominal', sort: series },
        y: { field: 'value', type: 'quantitative', title: yTitle, axis: { titleFontSize: 11, gridColor: '#e6e6e6' } },
      },
      layer: [
        {
          mark: { type: 'bar', width: { band: 0.9 } },
          encoding: {
            color: {
              field: 'series',
              type: 'nominal',
              sort: series,
              scale: { domain: series, range: series.map((s) => COLORS[s]) },
              legend: { title: null, orient: 'top', labelFontSize: 12, labelLimit: 400 },
            },
          },
        },
        { mark: { type: 'text', baseline: 'bottom', dy: -3, fontSize: 9, color: '#333' }, encoding: { text: { field: 'label' } } },
        { mark: { type: 'text', baseline: 'bottom', dy: -14, fontSize: 9, fontWeight: 'bold' }, encoding: { text: { field: 'ratio' } } },
      ],
    },
    resolve: { scale: { y: 'shared' } },
    config: { font: 'Helvetica, Arial, sans-serif', view: { stroke: '#ddd' }, background: 'white', padding: 12 },
  };
}

/** vega and vega-lite are ES modules with top-level await, which require() refuses: import() them, past the CommonJS compilation of ts-require. */
const importModule = new Function('url', 'return import(url)') as (url: string) => Promise<any>;

export async function renderSvg(spec: Record<string, unknown>): Promise<string> {
  const vega = await importModule(pathToFileURL(require.resolve('vega')).href);
  const vegaLite = await importModule(pathToFileURL(require.resolve('vega-lite')).href);
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: 'none' });
  try {
    return (await view.toSVG()) as string;
  } finally {
    view.finalize();
  }
}

function readJson<T>(file: string): T | undefined {
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as T) : undefined;
}

/**
 * Draws the charts from `resultsDir/latest.json` (and `peers.json` when it is there) into
 * `outDir`; returns the files written. A chart whose figures the run lacks is not drawn.
 */
export async function writeCharts(resultsDir: string, outDir: string): Promise<string[]> {
  const latest = readJson<BenchResult>(join(resultsDir, 'latest.json'));
  if (!latest) throw new Error(`no ${join(resultsDir, 'latest.json')}: run npm run bench first`);
  const peers = readJson<PeersResult>(join(resultsDir, 'peers.json'));
  const written: string[] = [];
  const write = async (name: string, spec: Record<string, unknown>) => {
    mkdirSync(outDir, { recursive: true });
    const file = join(outDir, name);
    writeFileSync(file, (await renderSvg(spec)) + '\n');
    written.push(file);
  };

  const cpu = cpuBars(latest);
  if (cpu.length) {
    const subtitle = [
      ...runLines('npm run bench', latest),
      floorLine(cpu),
      'PostgreSQL and MariaDB: the TypeORM store · Redis + near: the Redis store with nearCache: true',
    ];
    await write(
      'bench-ratios.svg',
      barSpec(cpu, 'App CPU each store adds per request over the bare handler (lower is better)', subtitle, 'µs per request', true),
    );
  }

  const peer = peers ? peerBars(peers) : [];
  if (peers && peer.length) {
    const subtitle = [
      ...runLines('npm run bench:peers', peers),
      `peer: @node-idempotency/nestjs ${peers.peer} beside this library in one NestJS ${peers.nest} app, on the same kind of store`,
      'near cache: the Redis store with nearCache: true (the peer has none: there it runs on plain Redis) · ×: the peer ÷ this library',
    ];
    await write(
      'bench-peers.svg',
      barSpec(peer, 'App CPU added per request: this library and the peer (lower is better)', subtitle, 'µs per request', true),
    );
  }
  return written;
}

if (require.main === module) {
  const dirs = { results: join(ROOT, 'bench', 'results'), out: join(ROOT, 'docs', 'images') };
  runMain(async () => {
    parseFlags(process.argv.slice(2), {
      '--results': (value) => (dirs.results = resolve(value())),
      '--out': (value) => (dirs.out = resolve(value())),
    });
    for (const file of await writeCharts(dirs.results, dirs.out)) process.stderr.write(`Wrote ${file}\n`);
  });
}
