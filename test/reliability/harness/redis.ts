import { startRedisServer, type RedisServerHandle } from '../../support/redis-servers.js';
import { formatStats, type InvariantReport } from './invariant.js';
import { HarnessRun } from './scenario.js';

/**
 * The Redis side of the invariant suites: a redis-server of the suite's own, with AOF and
 * fsync on every write, so a SIGKILLed Redis comes back with every record it acknowledged
 * (a non-persistent Redis forgets completed keys on restart, and then no store could keep
 * duplicates out), and two application processes per run on it, each run under a prefix
 * of its own. Call inside a `describe`: it registers the suite's set-up and tear-down.
 */
export function useRedisHarness(env: Record<string, string> = {}): {
  readonly redis: RedisServerHandle;
  startRun(): Promise<HarnessRun>;
} {
  let redis: RedisServerHandle | undefined;
  const runs: HarnessRun[] = [];

  beforeAll(async () => {
    redis = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
  }, 30_000);
  afterAll(async () => {
    await Promise.all(runs.map((run) => run.stop()));
    await redis?.stop();
  }, 30_000);

  return {
    get redis() {
      if (!redis) throw new Error('useRedisHarness: the redis-server is started in beforeAll');
      return redis;
    },
    async startRun() {
      const run = new HarnessRun({
        apps: 2,
        leaseTtl: 4_000,
        env: {
          HARNESS_STORE: 'redis',
          HARNESS_REDIS_PORT: String(this.redis.port),
          HARNESS_PREFIX: `harness:${Math.random().toString(36).slice(2)}:`,
          ...env,
        },
      });
      runs.push(run);
      await run.start();
      return run;
    },
  };
}

/** No violation, nothing unsettled, every key's effect exactly once, and replays seen. */
export function expectRedisInvariant(run: HarnessRun, report: InvariantReport & { unsettled: string[] }): void {
  const context = `seed=${run.seed} ${formatStats(report.stats)} faults=${JSON.stringify(run.faults)}`;
  expect({ context, violations: report.violations, unsettled: report.unsettled }).toEqual({ context, violations: [], unsettled: [] });
  expect(report.stats.effects).toBe(report.stats.keys);
  expect(report.stats.replays).toBeGreaterThan(0);
}
