/**
 * Before/after table from bench JSON files (e.g. runs with BENCH_LIB set to a copy of
 * lib/ from before a change, and runs of the working tree):
 *
 *   node -r ./test/support/ts-require.js bench/compare.ts --before a1.json a2.json --after b1.json b2.json
 *
 * Each figure is the median over the files (each file already holds medians over rounds).
 */
import { readFileSync } from 'node:fs';
import type { BenchResult, CaseSummary, HttpCase, Platform, Variant } from './report.js';
import { median } from './stats.js';

type Figure = 'rpsRatio' | 'addedCpuMicrosPerRequest' | 'cpuMicrosPerRequest' | 'p99Ratio';

export function compareResults(before: BenchResult[], after: BenchResult[]): string {
  const lines = [
    '| platform | case | store | req/s × bare, before → after | added app CPU µs/req, before → after | p99 × bare, before → after |',
    '|---|---|---|--:|--:|--:|',
  ];
  const pick = (results: BenchResult[], platform: Platform, c: HttpCase, v: Variant, figure: Figure) =>
    median(results.map((r) => r.http[platform]?.cases[c]?.[v]?.[figure]).filter((x): x is number => typeof x === 'number'));
  const first = after[0] ?? before[0];
  for (const [platform, result] of Object.entries(first?.http ?? {}) as [Platform, NonNullable<BenchResult['http'][Platform]>][]) {
    for (const [c, byVariant] of Object.entries(result.cases) as [HttpCase, Partial<Record<Variant, CaseSummary>>][]) {
      for (const v of Object.keys(byVariant) as Variant[]) {
        // A store one side did not measure (a store added by the change) shows as a dash there.
        const shown = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : '–');
        const cell = (figure: Figure, digits: number) =>
          `${shown(pick(before, platform, c, v, figure), digits)} → ${shown(pick(after, platform, c, v, figure), digits)}`;
        lines.push(
          `| ${platform} | ${c} | ${v} | ${cell('rpsRatio', 2)} | ${cell('addedCpuMicrosPerRequest', 0)} | ${cell('p99Ratio', 2)} |`,
        );
      }
    }
  }
  return lines.join('\n');
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const before: BenchResult[] = [];
  const after: BenchResult[] = [];
  let target: BenchResult[] | undefined;
  for (const arg of args) {
    if (arg === '--before') target = before;
    else if (arg === '--after') target = after;
    else if (target) target.push(JSON.parse(readFileSync(arg, 'utf8')) as BenchResult);
    else throw new Error('Usage: compare.ts --before a.json [...] --after b.json [...]');
  }
  process.stdout.write(compareResults(before, after) + '\n');
}
