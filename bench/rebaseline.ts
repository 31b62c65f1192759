/**
 * A saved run of `npm run bench` written before the six-run baseline (before 2026-12-05's
 * eighth round: every library store, then every floor, each divided by the mean of the
 * bare runs just before and after it), its issue-32 ratios recomputed three ways: with
 * that neighbour pair, with the median of the six bare runs around each run (what the
 * bench does now, `baselineOf`), and with the run's median bare run for all. Where the
 * three disagree by more than the target's margin, the run cannot decide that target.
 *
 *   node -r ./test/support/ts-require.js bench/rebaseline.ts bench/results/latest.json
 */
import { readFileSync } from 'node:fs';
import { baselineOf, FLOOR_OF, type BenchResult, type HttpCase, type RunSample } from './run.js';
import { median } from './stats.js';
import type { StoreName } from './stores.js';

type Baseline = 'pair' | 'six' | 'run';
const BASELINES: readonly Baseline[] = ['pair', 'six', 'run'];

const file = process.argv[2];
if (!file) throw new Error('usage: bench/rebaseline.ts <saved bench JSON>');
const result = JSON.parse(readFileSync(file, 'utf8')) as BenchResult;
const cpu = (r: RunSample) => r.cpuMicrosPerRequest!;

for (const [platform, figures] of Object.entries(result.http)) {
  const bare = figures.bare.rounds;
  // The order of that version: first = stores, floors, interceptor; replay = stores, floors;
  // a bare run before the round and after every timed run (the latency case on its own bare runs).
  const first = Object.keys(figures.cases.first ?? {});
  const replay = Object.keys(figures.cases.replay ?? {});
  const perRound = 1 + first.length + replay.length;
  // A run of the new order has as many bare runs, so the order is told by the floors: in
  // the old one every floor came after every store.
  const isFloor = (variant: string) => variant.startsWith('floor-');
  const firstFloor = first.findIndex(isFloor);
  const storeAfterAFloor = firstFloor >= 0 && first.slice(firstFloor).some((v) => !isFloor(v) && v !== 'interceptor');
  if (bare.length !== perRound * result.options.rounds || storeAfterAFloor) {
    throw new Error(`${platform}: not a run of the old order (its report already compares each run with the six bare runs around it)`);
  }
  const runMedian = median(bare.map(cpu));
  const added = (c: HttpCase, variant: string, how: Baseline): number => {
    const offset = c === 'first' ? 0 : first.length;
    const index = (c === 'first' ? first : replay).indexOf(variant);
    const rounds = figures.cases[c]![variant as StoreName]!.rounds;
    return median(
      rounds.map((sample, round) => {
        const before = perRound * round + offset + index;
        const base =
          how === 'pair'
            ? (cpu(bare[before]) + cpu(bare[before + 1])) / 2
            : how === 'six'
              ? baselineOf({ sample, series: bare, before }, cpu)
              : runMedian;
        return cpu(sample) - base;
      }),
    );
  };
  const rows: [string, (how: Baseline) => number, number][] = [];
  for (const c of ['first', 'replay'] as const) {
    for (const [store, target] of [
      ['memory', 1.3],
      ['redis', 1.15],
      ['typeorm', 1.25],
      ['mariadb', 1.25],
    ] as const) {
      if (!figures.cases[c]?.[store] || !figures.cases[c]?.[FLOOR_OF[store]]) continue;
      rows.push([`${c} ${store} ÷ floor`, (how) => added(c, store, how) / added(c, FLOOR_OF[store], how), target]);
    }
  }
  if (figures.cases.first?.redisNear)
    rows.push(['first near cache ÷ without', (how) => added('first', 'redisNear', how) / added('first', 'redis', how), 1.05]);
  if (figures.cases.replay?.redisNear)
    rows.push(['replay near cache ÷ memory', (how) => added('replay', 'redisNear', how) / added('replay', 'memory', how), 1.1]);
  console.log(
    `\n${platform}: added app CPU ratios, by baseline (pair: mean of the two neighbours; six: median of six; run: the run's median bare, ${runMedian.toFixed(1)} µs)`,
  );
  console.log(`| ratio | target | ${BASELINES.join(' | ')} |\n|---|--:|--:|--:|--:|`);
  for (const [name, ratio, target] of rows) {
    console.log(`| ${name} | ≤ ${target.toFixed(2)} | ${BASELINES.map((how) => ratio(how).toFixed(2)).join(' | ')} |`);
  }
}
