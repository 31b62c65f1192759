import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RunSample } from '../../bench/load.js';
import { checkTargets, markdownReport, type BenchResult } from '../../bench/report.js';
import { baselineOf, measureOrder, parseArgs, runBench } from '../../bench/run.js';

// The pieces of `npm run bench` on one tiny case: the app child starts, autocannon
// drives it, store calls are counted, and the report has its shape. No timing is
// asserted: speed belongs to the benchmark itself, not to the test suite.
describe('bench harness', () => {
  it('parses its flags and refuses unknown ones', () => {
    const options = parseArgs(['--platform', 'fastify', '--duration', '1', '--rounds=2', '--stores', 'memory', '--cases', 'first,replay']);
    expect(options).toMatchObject({
      platforms: ['fastify'],
      duration: 1,
      rounds: 2,
      stores: ['memory'],
      cases: ['first', 'replay'],
      connections: 50,
    });
    expect(parseArgs(['--platform', 'both']).platforms).toEqual(['express', 'fastify']);
    expect(() => parseArgs(['--bogus'])).toThrow(/Unknown option/);
    expect(() => parseArgs(['--stores', 'mongo'])).toThrow(/unknown store/);
  });

  it('runs each floor right after the first library store it is the floor of', () => {
    expect(
      measureOrder(
        ['memory', 'redis', 'redisNear', 'typeorm', 'mariadb', 'prisma', 'drizzle', 'node-redis'],
        ['floor-memory', 'floor-redis', 'floor-postgres', 'floor-mariadb'],
      ),
    ).toEqual([
      'memory',
      'floor-memory',
      'redis',
      'floor-redis',
      'redisNear',
      'typeorm',
      'floor-postgres',
      'mariadb',
      'floor-mariadb',
      'prisma',
      'drizzle',
      'node-redis',
    ]);
    // A floor whose main store is not measured follows the first store it serves.
    expect(measureOrder(['drizzle', 'memory'], ['floor-postgres', 'floor-memory'])).toEqual([
      'drizzle',
      'floor-postgres',
      'memory',
      'floor-memory',
    ]);
  });

  it('compares a run with the median of the three bare runs on each side, not one disturbed neighbour', () => {
    const bare = (cpu: number) => ({ cpuMicrosPerRequest: cpu }) as RunSample;
    // The run sits between bare runs 3 and 4; bare run 4 ran while the machine was busy.
    const series = [100, 101, 99, 100, 160, 102, 98, 300].map(bare);
    const cpu = (r: RunSample) => r.cpuMicrosPerRequest!;
    expect(baselineOf({ sample: bare(140), series, before: 3 }, cpu)).toBe(100.5);
    // At the edges of a run the window is what there is.
    expect(baselineOf({ sample: bare(140), series, before: 0 }, cpu)).toBe(100);
    expect(baselineOf({ sample: bare(140), series, before: 6 }, cpu)).toBe(131);
  });

  it("gives docs/performance.md's table back from the saved run (`npm run bench -- --from bench/results/latest.json`)", () => {
    const root = join(__dirname, '..', '..');
    const saved = JSON.parse(readFileSync(join(root, 'bench', 'results', 'latest.json'), 'utf8')) as BenchResult;
    const doc = readFileSync(join(root, 'docs', 'performance.md'), 'utf8');
    const start = '<!-- bench:results:start -->';
    const shown = doc
      .slice(doc.indexOf(start) + start.length, doc.indexOf('<!-- bench:results:end -->'))
      .trim()
      .split('\n');
    const rendered = markdownReport(saved, { docs: true }).trim().split('\n');
    // The second line describes the harness's baseline as it is today (the six bare runs
    // around each run); the published run divided by the two around it. Every figure is the run's.
    expect(rendered.filter((_, i) => i !== 1)).toEqual(shown.filter((_, i) => i !== 1));
  });

  it('runs one first-execution case against the memory store and counts its store calls', async () => {
    const options = {
      ...parseArgs([]),
      platforms: ['fastify' as const],
      duration: 1,
      rounds: 1,
      connections: 10,
      stores: ['memory' as const],
      cases: ['first' as const],
      updateDocs: false,
      gauge: false,
    };
    const result = await runBench(options, () => undefined);
    const first = result.http.fastify!.cases.first!;
    const memory = first.memory!;
    expect(memory.rounds).toHaveLength(1);
    expect(memory.rounds[0].requests).toBeGreaterThan(0);
    expect(memory.non2xx).toBe(0);
    // Counted, not assumed: a first execution is a claim and a complete.
    expect(memory.storeCallsPerRequest).toBeCloseTo(2, 1);
    for (const field of ['rps', 'p50Ms', 'p99Ms', 'rpsRatio', 'p50Ratio', 'p99Ratio', 'cpuMicrosPerRequest'] as const) {
      expect(Number.isFinite(memory[field])).toBe(true);
    }
    // The no-op interceptor reference runs beside the stores, and the memory floor (bench/floors.ts)
    // too, with the library's case divided by it.
    expect(first.interceptor?.rounds).toHaveLength(1);
    expect(first['floor-memory']?.rounds).toHaveLength(1);
    expect(first['floor-memory']?.non2xx).toBe(0);
    expect(memory.vsFloor?.floor).toBe('floor-memory');
    expect(memory.vsFloor!.rpsRatio).toBeCloseTo(memory.rps / first['floor-memory']!.rps, 2);
    expect(result.http.fastify!.bare.rounds.length).toBeGreaterThanOrEqual(2);

    const targets = checkTargets(result);
    expect(targets.map((t) => t.name)).toContain('fastify: memory first execution');
    expect(targets.map((t) => t.name)).toContain('fastify: memory first execution, added CPU ÷ floor');
    const report = markdownReport(result);
    expect(report).toContain('| first execution | memory |');
    // A child app, its warm-up and seven timed runs: 15 s alone, twice that beside the
    // other suites on 2 cores.
  }, 120_000);
});
