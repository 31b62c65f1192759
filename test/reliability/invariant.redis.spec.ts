import { isSuccess } from './harness/client.js';
import { expectRedisInvariant, useRedisHarness } from './harness/redis.js';
import { sleep, waitFor } from './harness/scenario.js';

// Two application processes over one RedisIdempotencyStore on a redis-server of this
// test's own, persistent (see useRedisHarness).
describe('invariant harness: Redis store, two processes, faults', () => {
  const harness = useRedisHarness();

  it('keeps the invariant when an application process is SIGKILLed mid-handler', async () => {
    const run = await harness.startRun();
    run.startLoad();
    await sleep(1_000);
    const { hungKeys } = await run.killMidHandler(1);
    await sleep(1_000);
    const report = await run.finish();
    expectRedisInvariant(run, report);
    // The hung keys ran nowhere before the kill, and exactly once after their lease ran out.
    for (const key of hungKeys) {
      expect(run.client.outcomes.filter((o) => o.key === key && isSuccess(o.status)).length).toBeGreaterThan(0);
    }
  }, 60_000);

  it('keeps the invariant when Redis is killed and restarted, answers 503 fast meanwhile, and heals by itself', async () => {
    const run = await harness.startRun();
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'redis-down';
    run.faults.push({ kind: 'redis-sigkill', at: Date.now() });
    await harness.redis.kill('SIGKILL');
    await sleep(1_000);
    await harness.redis.restart();
    run.client.phase = 'after-restart';
    // Healing needs nothing from the test: the clients reconnect by themselves.
    await waitFor(() => run.outcomesIn('after-restart').some((o) => isSuccess(o.status)), 15_000, 'a success after the restart');
    await sleep(1_000);
    const report = await run.finish();
    expectRedisInvariant(run, report);
    const down = run.outcomesIn('redis-down');
    expect(down.filter((o) => o.status === 503).length).toBeGreaterThan(0);
    // Fast failure, not a hang: no request timed out on the client.
    expect(run.client.outcomes.filter((o) => o.status === 'timeout')).toEqual([]);
  }, 60_000);
});
