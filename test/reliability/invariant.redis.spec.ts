import { startRedisServer, type RedisServerHandle } from '../support/redis-servers.js';
import { isSuccess } from './harness/client.js';
import { formatStats, type InvariantReport } from './harness/invariant.js';
import { HarnessRun, sleep, waitFor } from './harness/scenario.js';

// Two application processes over one RedisIdempotencyStore on a redis-server of this
// test's own. AOF with fsync on every write, so a SIGKILLed Redis comes back with every
// record it acknowledged (a non-persistent Redis forgets completed keys on restart, and
// then no store could keep duplicates out).
describe('invariant harness: Redis store, two processes, faults', () => {
  let redis: RedisServerHandle;
  const runs: HarnessRun[] = [];

  beforeAll(async () => {
    redis = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
  }, 30_000);
  afterAll(async () => {
    await Promise.all(runs.map((run) => run.stop()));
    await redis?.stop();
  }, 30_000);

  async function startRun(): Promise<HarnessRun> {
    const run = new HarnessRun({
      apps: 2,
      leaseTtl: 4_000,
      env: {
        HARNESS_STORE: 'redis',
        HARNESS_REDIS_PORT: String(redis.port),
        HARNESS_PREFIX: `harness:${Math.random().toString(36).slice(2)}:`,
      },
    });
    runs.push(run);
    await run.start();
    return run;
  }

  function expectInvariant(run: HarnessRun, report: InvariantReport & { unsettled: string[] }): void {
    const context = `seed=${run.seed} ${formatStats(report.stats)} faults=${JSON.stringify(run.faults)}`;
    expect({ context, violations: report.violations, unsettled: report.unsettled }).toEqual({ context, violations: [], unsettled: [] });
    expect(report.stats.effects).toBe(report.stats.keys);
    expect(report.stats.replays).toBeGreaterThan(0);
  }

  it('keeps the invariant when an application process is SIGKILLed mid-handler', async () => {
    const run = await startRun();
    run.startLoad();
    await sleep(1_000);
    const { hungKeys } = await run.killMidHandler(1);
    await sleep(1_000);
    const report = await run.finish();
    expectInvariant(run, report);
    // The hung keys ran nowhere before the kill, and exactly once after their lease ran out.
    for (const key of hungKeys) {
      expect(run.client.outcomes.filter((o) => o.key === key && isSuccess(o.status)).length).toBeGreaterThan(0);
    }
  }, 60_000);

  it('keeps the invariant when Redis is killed and restarted, answers 503 fast meanwhile, and heals by itself', async () => {
    const run = await startRun();
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'redis-down';
    run.faults.push({ kind: 'redis-sigkill', at: Date.now() });
    await redis.kill('SIGKILL');
    await sleep(1_000);
    await redis.restart();
    run.client.phase = 'after-restart';
    // Healing needs nothing from the test: the clients reconnect by themselves.
    await waitFor(() => run.outcomesIn('after-restart').some((o) => isSuccess(o.status)), 15_000, 'a success after the restart');
    await sleep(1_000);
    const report = await run.finish();
    expectInvariant(run, report);
    const down = run.outcomesIn('redis-down');
    expect(down.filter((o) => o.status === 503).length).toBeGreaterThan(0);
    // Fast failure, not a hang: no request timed out on the client.
    expect(run.client.outcomes.filter((o) => o.status === 'timeout')).toEqual([]);
  }, 60_000);
});
