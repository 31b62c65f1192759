import { checkTargets, markdownReport, parseArgs, runBench } from '../../bench/run.js';

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
  }, 30_000);
});
