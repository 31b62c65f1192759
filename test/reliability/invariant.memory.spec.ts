import { HarnessRun, sleep } from './harness/scenario.js';
import { formatStats } from './harness/invariant.js';

// The harness itself on the reference store: one process (a memory store is per process),
// the full randomized mix, and the invariant checked from the effect log.
describe('invariant harness: memory store, one process', () => {
  const run = new HarnessRun({ apps: 1, env: { HARNESS_STORE: 'memory' } });

  beforeAll(() => run.start(), 30_000);
  afterAll(() => run.stop());

  it('runs every key at most once, exactly once per success, with identical successes', async () => {
    run.startLoad();
    await sleep(2_000);
    const report = await run.finish();
    const context = `seed=${run.seed} ${formatStats(report.stats)}`;
    expect({ context, violations: report.violations, unsettled: report.unsettled }).toEqual({ context, violations: [], unsettled: [] });
    // The mix really exercised the protocol.
    expect(report.stats.replays).toBeGreaterThan(0);
    expect(report.stats.inFlight409).toBeGreaterThan(0);
    expect(report.stats.mismatch422).toBeGreaterThan(0);
    expect(report.stats.injectedFailures502).toBeGreaterThan(0);
    expect(report.stats.effects).toBe(report.stats.keys);
  }, 60_000);
});
