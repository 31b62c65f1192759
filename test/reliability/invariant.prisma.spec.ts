import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { generatedClientDir, type Provider } from '../prisma/support.js';
import { isSuccess } from './harness/client.js';
import { formatStats, type InvariantReport } from './harness/invariant.js';
import { HarnessMariaDatabase } from './harness/mariadb.js';
import { HarnessDatabase } from './harness/postgres.js';
import { HarnessRun, sleep, waitFor } from './harness/scenario.js';

/** The server of a run, its Prisma provider, and its connection fault: pg_terminate_backend, or KILL CONNECTION. */
function serverOf(server: 'PostgreSQL' | 'MariaDB') {
  const id = randomBytes(4).toString('hex');
  if (server === 'PostgreSQL') {
    const db = new HarnessDatabase(`harness_pr_${process.pid}_${id}`, `idem-harness-pr-${id}`);
    return {
      provider: 'postgresql' as Provider,
      env: { HARNESS_PG_SCHEMA: db.schema, HARNESS_PG_APP_NAME: db.applicationName },
      create: () => db.create(),
      drop: () => db.drop(),
      cutConnections: () => db.terminateAppConnections(),
      readEffects: () => db.readEffects(),
    };
  }
  const db = new HarnessMariaDatabase(`harness_pr_${process.pid}_${id}`);
  return {
    provider: 'mysql' as Provider,
    env: { HARNESS_DB: 'mariadb', HARNESS_PG_SCHEMA: db.database, HARNESS_PG_APP_NAME: 'unused-on-mariadb' },
    create: () => db.create(),
    drop: () => db.drop(),
    cutConnections: () => db.killAppConnections(),
    readEffects: () => db.readEffects(),
  };
}

// Two application processes over one PrismaIdempotencyStore (a generated Prisma 7 client on
// its driver adapter), while the test cuts every connection they hold, and (transactional)
// SIGKILLs one of them mid-request.
describe.each([
  { server: 'PostgreSQL', mode: 'claim / complete', transactional: false },
  { server: 'PostgreSQL', mode: 'transactional (effect and record in one transaction)', transactional: true },
  { server: 'MariaDB', mode: 'transactional (effect and record in one transaction)', transactional: true },
] as const)('invariant harness: Prisma store on $server, two processes, $mode', ({ server, transactional }) => {
  const db = serverOf(server);
  const env: Record<string, string | undefined> = { HARNESS_STORE: 'prisma', HARNESS_TRANSACTIONAL: transactional ? '1' : '0', ...db.env };
  const run = new HarnessRun({
    apps: 2,
    leaseTtl: 4_000,
    env,
    readEffects: transactional ? () => db.readEffects() : undefined,
  });

  beforeAll(async () => {
    // Generated here, once (offline, cached in .tmp/ by schema text), and handed to the
    // processes by path: they load it and never generate themselves.
    env.HARNESS_PRISMA_CLIENT = join(generatedClientDir(db.provider), 'client.ts');
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

  it('keeps the invariant while its connections are cut, and heals by itself', async () => {
    run.startLoad();
    await sleep(1_000);
    run.client.phase = 'connections-cut';
    let cut = 0;
    for (let i = 0; i < 3; i++) {
      const n = await db.cutConnections();
      cut += n;
      run.faults.push({ kind: 'connections-cut', at: Date.now(), detail: `${n} connections` });
      await sleep(300);
    }
    run.client.phase = 'after-cut';
    // Healing needs nothing from the test: the adapters' pools open new connections by themselves.
    await waitFor(() => run.outcomesIn('after-cut').some((o) => isSuccess(o.status)), 15_000, 'a success after the cuts');
    await sleep(500);
    const report = await run.finish();
    expectInvariant(report);
    expect(cut).toBeGreaterThan(0);
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
      expect(run.faults.filter((f) => f.kind === 'app-sigkill-undrained')).toHaveLength(2);
      expect(run.client.outcomes.filter((o) => o.status === 'network').length).toBeGreaterThan(0);
    }, 60_000);
  }
});
