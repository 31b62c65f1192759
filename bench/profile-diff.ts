/**
 * The library beside its floor (bench/floors.ts), function by function: where the app
 * CPU that `@Idempotent()` adds beyond the hand-written route goes.
 *
 *   npm run bench:profile-diff -- --platform express --store mariadb --case replay
 *   npm run bench:profile-diff -- --platform fastify --store typeorm --case first --rounds 4 --out /tmp/diff.md
 *   npm run bench:profile-diff -- --store redisNear --against redis --case first   # two stores instead
 *
 * A profile of the whole bench app (`npm run bench -- --cpu-prof`) mixes the library's
 * route, the floor's and the bare one in one process: only lib/ and bench/floors.ts
 * can be told apart there, not Express, the driver, Nest or the garbage collector. Here
 * each side gets a process of its own (bench/app.ts, the same app) that serves only its
 * route while it is profiled (the inspector's profiler, started and stopped over IPC, so
 * start-up is left out), in alternating rounds; every function's self time per request
 * is then the library's minus the floor's. The sum of the differences is the CPU the
 * library adds beyond its floor, as the profiler sees it (sampling adds its own cost to
 * both sides; the process's own CPU per request, measured beside it, is given too).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { listOf, numberFlags, parseFlags } from './args.js';
import { runMain } from './harness.js';
import { AppProcess, cannon, storeReplayed } from './load.js';
import { PLATFORMS, type Platform } from './report.js';
import { ALL_STORES, FLOOR_OF, type StoreName } from './stores.js';
import { round } from './stats.js';

type Side = 'library' | 'floor';
const SIDES: readonly Side[] = ['library', 'floor'];

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  startTime: number;
  endTime: number;
}

/** The groups self time is summed by, the first that matches a function's file. */
const GROUPS: Array<[string, (url: string) => boolean]> = [
  ['lib', (url) => url.includes('/lib/') && !url.includes('node_modules')],
  ['floor', (url) => url.includes('/bench/floors')],
  ['pg', (url) => url.includes('node_modules/pg')],
  ['mysql', (url) => url.includes('node_modules/mysql2') || url.includes('node_modules/mariadb')],
  ['ioredis', (url) => url.includes('node_modules/ioredis')],
  ['typeorm', (url) => url.includes('node_modules/typeorm')],
  ['express', (url) => /node_modules\/(express|router|body-parser|finalhandler|send)\//.test(url)],
  ['fastify', (url) => url.includes('node_modules/fastify') || url.includes('node_modules/@fastify')],
  ['nest', (url) => url.includes('node_modules/@nestjs')],
  ['rxjs', (url) => url.includes('node_modules/rxjs')],
  ['node', (url) => url.startsWith('node:')],
];

function groupOf(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  return GROUPS.find(([, test]) => test(url))?.[0] ?? 'other';
}

interface DiffOptions {
  platform: Platform;
  store: StoreName;
  case: 'first' | 'replay';
  duration: number;
  rounds: number;
  connections: number;
  /** The profiler's sampling interval, µs (V8's default is 1 000). */
  interval: number;
  top: number;
  out?: string;
  /** Compare with this store's route instead of the floor (`--against redis` beside `--store redisNear`). */
  against?: StoreName;
}

function parseArgs(argv: string[]): DiffOptions {
  const options: DiffOptions = {
    platform: 'express',
    store: 'typeorm',
    case: 'replay',
    duration: 5,
    rounds: 2,
    connections: 50,
    interval: 100,
    top: 25,
  };
  parseFlags(argv, {
    '--platform': (value) => ([options.platform] = listOf('--platform', value(), PLATFORMS, 'platform')),
    '--store': (value) => ([options.store] = listOf('--store', value(), ALL_STORES, 'store')),
    '--case': (value) => ([options.case] = listOf('--case', value(), ['first', 'replay'] as const, 'case')),
    '--against': (value) => ([options.against] = listOf('--against', value(), ALL_STORES, 'store')),
    '--out': (value) => (options.out = value()),
    ...numberFlags(options, ['duration', 'rounds', 'connections', 'interval', 'top']),
  });
  return options;
}

/** Self time per function (and per group) of one or more profiles, µs. */
class SelfTimes {
  readonly byFunction = new Map<string, number>();
  readonly byGroup = new Map<string, number>();
  requests = 0;
  cpuMicros = 0;

  add(profile: Profile): void {
    const microsPerSample = (profile.endTime - profile.startTime) / Math.max(1, profile.samples.length);
    for (const node of profile.nodes) {
      const self = (node.hitCount ?? 0) * microsPerSample;
      if (self === 0) continue;
      const group = groupOf(node);
      this.byGroup.set(group, (this.byGroup.get(group) ?? 0) + self);
      const { functionName, url, lineNumber } = node.callFrame;
      const where = url
        ? `${url
            .replace(/^.*node_modules\//, '')
            .split('/')
            .slice(-2)
            .join('/')}:${lineNumber + 1}`
        : '';
      const name = `${group} ${functionName || '(anonymous)'} ${where}`.trim();
      this.byFunction.set(name, (this.byFunction.get(name) ?? 0) + self);
    }
  }
}

/** The route each side serves: the store's, and its floor's or the `--against` store's. */
function pathOf(side: Side, options: DiffOptions): string {
  return `/${side === 'library' ? options.store : (options.against ?? FLOOR_OF[options.store])}/first`;
}

/** How the report names each side. */
function labelOf(side: Side, options: DiffOptions): string {
  return side === 'library' ? options.store : (options.against ?? 'floor');
}

async function measureSide(app: AppProcess, side: Side, options: DiffOptions, file: string, times: SelfTimes, key: string) {
  const path = pathOf(side, options);
  if (options.case === 'replay') await storeReplayed(app.port, path, key);
  const before = await app.counts();
  await app.request({ type: 'profile-start', intervalMicros: options.interval });
  const { result } = await cannon(
    app.port,
    { path, key: options.case === 'first' ? 'unique' : key, duration: options.duration },
    options.connections,
  );
  const after = await app.settledCounts();
  await app.request({ type: 'profile-stop', file });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${side}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
  times.add(JSON.parse(readFileSync(file, 'utf8')) as Profile);
  times.requests += result.requests.total;
  times.cpuMicros += after.cpuMicros - before.cpuMicros;
  return result.requests.total;
}

function report(options: DiffOptions, times: Record<Side, SelfTimes>): string {
  const per = (side: Side, micros: number | undefined) => (micros ?? 0) / times[side].requests;
  const [a, b] = [labelOf('library', options), labelOf('floor', options)];
  const lines = [
    `# ${options.platform}, ${options.case}: ${a} beside ${b}, function by function`,
    '',
    `${new Date().toISOString()} · ${options.rounds} rounds of ${options.duration} s per side, alternating, ${options.connections} connections · ` +
      `sampling every ${options.interval} µs · one app process per side (bench/app.ts) serving only its route while profiled`,
    '',
    `Requests: ${a} ${times.library.requests}, ${b} ${times.floor.requests}. App CPU per request (process.cpuUsage, profiler running): ` +
      `${a} ${round(per('library', times.library.cpuMicros), 1)} µs, ${b} ${round(per('floor', times.floor.cpuMicros), 1)} µs, ` +
      `difference **${round(per('library', times.library.cpuMicros) - per('floor', times.floor.cpuMicros), 1)} µs**.`,
    '',
    `| group | ${a} µs/req | ${b} µs/req | ${a} − ${b} |`,
    '|---|--:|--:|--:|',
  ];
  /** Per name, µs per request on each side, largest difference first (`byAbsolute`: by its size). */
  const rowsOf = (which: 'byGroup' | 'byFunction', byAbsolute: boolean) => {
    const names = new Set([...times.library[which].keys(), ...times.floor[which].keys()]);
    const rows = [...names].map((n) => ({
      name: n,
      library: per('library', times.library[which].get(n)),
      floor: per('floor', times.floor[which].get(n)),
    }));
    const key = (r: { library: number; floor: number }) => (byAbsolute ? Math.abs(r.library - r.floor) : r.library - r.floor);
    return rows.sort((x, y) => key(y) - key(x));
  };
  const line = (name: string, library: number, floor: number) =>
    `| ${name} | ${library.toFixed(2)} | ${floor.toFixed(2)} | ${(library - floor).toFixed(2)} |`;
  const groups = rowsOf('byGroup', false);
  for (const row of groups) lines.push(line(row.name, row.library, row.floor));
  const busy = groups.filter((row) => row.name !== '(idle)');
  const sum = (side: Side) => busy.reduce((total, row) => total + row[side], 0);
  lines.push(
    line('**all but (idle)**', sum('library'), sum('floor')),
    '',
    `The ${options.top} functions whose self time per request differs most (positive: ${a} spends more):`,
    '',
    `| function | ${a} µs/req | ${b} µs/req | ${a} − ${b} |`,
    '|---|--:|--:|--:|',
  );
  for (const row of rowsOf('byFunction', true).slice(0, options.top)) {
    lines.push(line(`\`${row.name.replace(/\|/g, '\\|')}\``, row.library, row.floor));
  }
  return lines.join('\n') + '\n';
}

async function main(): Promise<void> {
  const options = parseArgs(process.argv.slice(2));
  const runId = randomBytes(3).toString('hex');
  const dir = join(tmpdir(), `profile-diff-${runId}`);
  mkdirSync(dir, { recursive: true });
  const apps = {} as Record<Side, AppProcess>;
  const times = { library: new SelfTimes(), floor: new SelfTimes() };
  try {
    for (const side of SIDES) {
      apps[side] = await AppProcess.start({
        platform: options.platform,
        stores: options.against ? [options.store, options.against] : [options.store],
        slowMs: 1_000,
        runId: `${runId}${side[0]}`,
        autoPipelining: false,
      });
      for (const store of [options.store, options.against ?? options.store]) {
        if (!apps[side].stores.includes(store)) throw new Error(`the ${store} store did not open (is its server up?)`);
      }
    }
    // Warm-up: both routes in both processes, both cases, so that compilation and pool
    // connections are not profiled and both processes are in the state the bench's one
    // app is in. A first execution enters the durable steps' AsyncLocalStorage, and on
    // Node 20 that installs promise hooks every promise of the process pays from then on
    // (Fastify's bare route: about +13 µs per request): warmed on one side only, the floor
    // would be measured without them.
    for (const side of SIDES) {
      for (const path of [pathOf('library', options), pathOf('floor', options)]) {
        await cannon(apps[side].port, { path, key: 'unique', duration: 1 }, options.connections);
        await cannon(apps[side].port, { path, key: `warm-${runId}`, duration: 1 }, options.connections);
      }
    }
    for (let r = 0; r < options.rounds; r++) {
      const order = r % 2 === 0 ? SIDES : [...SIDES].reverse();
      for (const side of order) {
        const requests = await measureSide(
          apps[side],
          side,
          options,
          join(dir, `${side}-${r}.cpuprofile`),
          times[side],
          `diff-${runId}-${r}`,
        );
        process.stderr.write(`round ${r + 1} ${side}: ${requests} requests\n`);
      }
    }
  } finally {
    for (const side of SIDES) await apps[side]?.close();
  }
  const text = report(options, times);
  if (options.out) writeFileSync(options.out, text);
  process.stdout.write(text + (options.out ? `\nWrote ${options.out}; profiles in ${dir}\n` : `\nProfiles in ${dir}\n`));
}

if (require.main === module) runMain(main);
