import { randomBytes } from 'node:crypto';
import { isSuccess } from './harness/client.js';
import { formatStats, type InvariantReport } from './harness/invariant.js';
import { HarnessDatabase } from './harness/postgres.js';
import { HarnessRun, sleep, waitFor } from './harness/scenario.js';

// Two application processes over one TypeOrmIdempotencyStore (PostgreSQL), while the
// test terminates every connection they hold (pg_terminate_backend by application_name).
describe.each([
  { mode: 'claim / complete', transactional: false },
  { mode: 'transactional (effect and record in one transaction)', transactional: true },
])('invariant harness: TypeORM store, two processes, $mode', ({ transactional }) => {
  const id = randomBytes(4).toString('hex');
  const db = new HarnessDatabase(`harness_${process.pid}_${id}`, `idem-harness-${id}`);
  const run = new HarnessRun({
    apps: 2,
    leaseTtl: 4_000,
    env: {
      HARNESS_STORE: 'typeorm',
      HARNESS_PG_SCHEMA: db.schema,
      HARNESS_PG_APP_NAME: db.applicationName,
      HARNESS_TRANSACTIONAL: transactional ? '1' : '0',
    },
    readEffects: transactional ? () => db.readEffects() : undefined,
  });

  beforeAll(async () => {
    await db.create();
    await run.start();
  }, 60_000);
  afterAll(async () => {
    await run.stop();
    await db.drop();
  }, 30_000);

  function expectInvariant(report: InvariantReport & { unsettled: string[] }): void {
    const context = `seed=${run.seed} ${formatStats(report.stats)} faults=${JSON.stringify(run.faults)}`;
    expect({ context, violations: report.violations, unsettled: report.unsettled }).toEqual({ context, violations: [], unsettled: [] });
    expect(report.stats.effects).toBe(report.stats.keys);
    expect(report.stats.replays).toBeGreaterThan(0);
  }

  it('keeps the invariant while its PostgreSQL connections are terminated, and heals by itself', async () => {
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'pg-terminated';
    let terminated = 0;
    for (let i = 0; i < 3; i++) {
      const n = await db.terminateAppConnections();
      terminated += n;
      run.faults.push({ kind: 'pg-terminate', at: Date.now(), detail: `${n} connections` });
      await sleep(300);
    }
    run.client.phase = 'after-terminate';
    // Healing needs nothing from the test: the pools open new connections by themselves.
    await waitFor(() => run.outcomesIn('after-terminate').some((o) => isSuccess(o.status)), 15_000, 'a success after the terminations');
    await sleep(500);
    const report = await run.finish();
    expectInvariant(report);
    expect(terminated).toBeGreaterThan(0);
    // Both processes survived the dropped connections and kept serving.
    expect(run.apps.flatMap((app) => app.crashes)).toEqual([]);
    expect(run.apps.every((app) => app.alive)).toBe(true);
    expect(run.client.outcomes.filter((o) => o.status === 'timeout')).toEqual([]);
  }, 60_000);

  if (transactional) {
    it('keeps the invariant when a process is SIGKILLed at a random point of its requests (no draining)', async () => {
      run.client.phase = 'load';
      run.startLoad();
      for (let i = 0; i < 2; i++) {
        await sleep(700);
        await run.crash(1);
      }
      await sleep(700);
      const report = await run.finish();
      expectInvariant(report);
      const crashes = run.faults.filter((f) => f.kind === 'app-sigkill-undrained');
      expect(crashes).toHaveLength(2);
      // Requests really were cut short by the kills.
      expect(run.client.outcomes.filter((o) => o.status === 'network').length).toBeGreaterThan(0);
    }, 60_000);
  }
});
