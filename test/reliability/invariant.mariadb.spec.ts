import { randomBytes } from 'node:crypto';
import { isSuccess } from './harness/client.js';
import { formatStats, type InvariantReport } from './harness/invariant.js';
import { HarnessMariaDatabase } from './harness/mariadb.js';
import { HarnessRun, sleep, waitFor } from './harness/scenario.js';

// Two application processes over one TypeOrmIdempotencyStore on MariaDB, while the test
// kills every connection they hold (KILL CONNECTION).
describe.each([
  { mode: 'claim / complete', transactional: false },
  { mode: 'transactional (effect and record in one transaction)', transactional: true },
])('invariant harness: TypeORM store on MariaDB, two processes, $mode', ({ transactional }) => {
  const db = new HarnessMariaDatabase(`harness_${process.pid}_${randomBytes(4).toString('hex')}`);
  const run = new HarnessRun({
    apps: 2,
    leaseTtl: 4_000,
    env: {
      HARNESS_STORE: 'typeorm',
      HARNESS_DB: 'mariadb',
      HARNESS_PG_SCHEMA: db.database,
      HARNESS_PG_APP_NAME: 'unused-on-mariadb',
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

  it('keeps the invariant while its connections are killed (KILL CONNECTION), and heals by itself', async () => {
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'connections-killed';
    let killed = 0;
    for (let i = 0; i < 3; i++) {
      const n = await db.killAppConnections();
      killed += n;
      run.faults.push({ kind: 'kill-connection', at: Date.now(), detail: `${n} connections` });
      await sleep(300);
    }
    run.client.phase = 'after-kill';
    // Healing needs nothing from the test: the pools open new connections by themselves.
    await waitFor(() => run.outcomesIn('after-kill').some((o) => isSuccess(o.status)), 15_000, 'a success after the kills');
    await sleep(500);
    const report = await run.finish();
    expectInvariant(report);
    expect(killed).toBeGreaterThan(0);
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
      expect(run.faults.filter((f) => f.kind === 'app-sigkill-undrained')).toHaveLength(2);
      expect(run.client.outcomes.filter((o) => o.status === 'network').length).toBeGreaterThan(0);
    }, 60_000);
  }
});
