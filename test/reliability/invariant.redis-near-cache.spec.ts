import { isSuccess } from './harness/client.js';
import { expectRedisInvariant, useRedisHarness } from './harness/redis.js';
import { HarnessRun, sleep, waitFor } from './harness/scenario.js';

// The Redis scenarios of invariant.redis.spec.ts with the store's near cache on in both
// application processes, and the claim the near cache must keep on top: a forget() made
// in one process is never answered with the forgotten result by the other, through the
// whole HTTP stack (module, interceptor, store).
describe('invariant harness: Redis store with its near cache, two processes', () => {
  const harness = useRedisHarness({ HARNESS_NEAR_CACHE: '1' });

  interface NearCacheStats {
    enabled: boolean;
    hits: number;
  }

  async function post(run: HarnessRun, app: number, path: string, key: string, body: unknown = {}) {
    const response = await fetch(`${run.apps[app].url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      body: (await response.json()) as unknown,
    };
  }

  const statsOf = async (run: HarnessRun, app: number) => (await post(run, app, '/near-cache-stats', 'stats')).body as NearCacheStats;

  it('keeps the invariant when an application process is SIGKILLed mid-handler', async () => {
    const run = await harness.startRun();
    run.startLoad();
    await sleep(1_000);
    await run.killMidHandler(1);
    await sleep(1_000);
    const report = await run.finish();
    expectRedisInvariant(run, report);
  }, 60_000);

  it('keeps the invariant when Redis is killed and restarted: the caches switch off, empty, and come back', async () => {
    const run = await harness.startRun();
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'redis-down';
    run.faults.push({ kind: 'redis-sigkill', at: Date.now() });
    await harness.redis.kill('SIGKILL');
    await waitFor(async () => !(await statsOf(run, 0)).enabled && !(await statsOf(run, 1)).enabled, 10_000, 'both caches to switch off');
    await sleep(500);
    await harness.redis.restart();
    run.client.phase = 'after-restart';
    await waitFor(() => run.outcomesIn('after-restart').some((o) => isSuccess(o.status)), 15_000, 'a success after the restart');
    await waitFor(async () => (await statsOf(run, 0)).enabled && (await statsOf(run, 1)).enabled, 15_000, 'both caches to switch on again');
    await sleep(500);
    const report = await run.finish();
    expectRedisInvariant(run, report);
    expect(run.client.outcomes.filter((o) => o.status === 'timeout')).toEqual([]);
  }, 60_000);

  it('never replays a result that another process forgot, nor the old one after it ran again there (100 keys)', async () => {
    const run = await harness.startRun();
    const stale: string[] = [];
    const hitsBefore = (await statsOf(run, 0)).hits;
    for (let i = 0; i < 100; i++) {
      const key = `${run.runId}-forget-${i}`;
      const body = { payload: { i } };
      const first = await post(run, 0, '/work', key, body);
      expect(first.status).toBe(201);
      const firstEffect = (first.body as { effectId: string }).effectId;
      // Replayed by process 0 until it answers from its near cache.
      await waitFor(
        async () => {
          const hits = (await statsOf(run, 0)).hits;
          const replay = await post(run, 0, '/work', key, body);
          expect(replay).toMatchObject({ status: 201, replayed: true, body: { effectId: firstEffect } });
          return (await statsOf(run, 0)).hits > hits;
        },
        10_000,
        `${key} to be answered from process 0's near cache`,
      );
      // Forgotten by process 1, then process 0 must run it again...
      expect((await post(run, 1, '/forget', key)).body).toBe(true);
      const again = await post(run, 0, '/work', key, body);
      const secondEffect = (again.body as { effectId: string }).effectId;
      if (again.replayed || secondEffect === firstEffect) {
        // No record was made again: the rest of this key's round would only fail on that.
        stale.push(`${key}: replayed ${firstEffect} after the forget`);
        continue;
      }
      expect(again).toMatchObject({ status: 201, replayed: false });
      // ...and once process 1 forgot it again and ran it itself, process 0 replays that new result.
      expect((await post(run, 1, '/forget', key)).body).toBe(true);
      const third = await post(run, 1, '/work', key, body);
      expect(third).toMatchObject({ status: 201, replayed: false });
      const thirdEffect = (third.body as { effectId: string }).effectId;
      const replay = await post(run, 0, '/work', key, body);
      if ((replay.body as { effectId: string }).effectId !== thirdEffect)
        stale.push(`${key}: answered ${JSON.stringify(replay.body)}, not ${thirdEffect}`);
    }
    expect(stale).toEqual([]);
    expect((await statsOf(run, 0)).hits - hitsBefore).toBeGreaterThanOrEqual(100);
  }, 120_000);
});
