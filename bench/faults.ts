/**
 * The figures of docs/reliability.md's network-fault rows (issue 31), measured rather than
 * asserted: per store, with its defaults, through the fault proxy of the test harness and
 * under the fault suites' load (two instances, duplicates, slow and failing handlers):
 *
 * - stall: every path frozen for up to 10 s (inside the lease); the slowest 503 of the
 *   requests sent during the stall, and how many were still waiting when it healed;
 * - latency: answers per second and p99 with no latency, then with 200 ± 50 ms per round trip;
 * - reset: replies cut after 5 bytes with chance 0.25; how many 503, and how many keys ran
 *   their handler twice (the checker's violations).
 *
 *   node -r ./test/support/ts-require.js bench/faults.ts [stores] [seconds per phase] [stall,latency,reset]
 *   node -r ./test/support/ts-require.js bench/faults.ts redis,postgres,postgres-tx 3
 *
 * FAULT_STALL_MS sets the stall's length (a stall past 20 s shows the lease running out:
 * handlers run again, each after a `lease_lost`); FAULT_TRACE=file.jsonl logs every store
 * call, handler, effect and answer (test/faults/harness/trace.ts).
 */
import { FaultRun, sleep, untilOutcomes } from '../test/faults/harness/run.js';
import {
  mariadbFaultStore,
  postgresFaultStore,
  redisClusterFaultStore,
  redisFaultStore,
  type FaultStore,
} from '../test/faults/harness/stores.js';
import { isSuccess, type Outcome } from '../test/reliability/harness/client.js';
import { trace } from '../test/faults/harness/trace.js';

const STORES: Record<string, { open: () => Promise<FaultStore>; transactional?: boolean }> = {
  redis: { open: redisFaultStore },
  'redis-cluster': { open: redisClusterFaultStore },
  postgres: { open: () => postgresFaultStore() },
  'postgres-tx': { open: () => postgresFaultStore({ transactional: true }), transactional: true },
  mariadb: { open: () => mariadbFaultStore() },
  'mariadb-tx': { open: () => mariadbFaultStore({ transactional: true }), transactional: true },
};

const HANG_MS = 35_000;
/**
 * Longest stall, ms: well inside what is left of a lease renewed every third of it (two
 * thirds of the 30 s default). A longer one lets the leases of the handlers it catches run
 * out, and their retries run them again, as documented (docs/reliability.md, "A lease
 * longer than the outages you want to absorb"): that would measure the lease, not the fault.
 */
const STALL_MS = Number(process.env.FAULT_STALL_MS ?? 10_000);

function p99(outcomes: Outcome[]): number {
  const sorted = outcomes.map((o) => o.durationMs).sort((a, b) => a - b);
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))];
}

async function withRun<T>(name: string, store: FaultStore, transactional: boolean, body: (run: FaultRun) => Promise<T>): Promise<T> {
  const run = new FaultRun(store, { answerBoundMs: HANG_MS, transactional });
  await run.start();
  try {
    run.startLoad();
    await untilOutcomes(run, (o) => isSuccess(o.status), 40, 30_000, `${name}: successes before the fault`);
    return await body(run);
  } finally {
    await Promise.all(store.proxies.map((proxy) => proxy.heal()));
    await run.stop();
  }
}

async function measure(name: string, seconds: number, phases: string[]): Promise<string[]> {
  const { open, transactional = false } = STORES[name];
  const store = await open();
  const lines: string[] = [];
  try {
    if (phases.includes('stall'))
      lines.push(
        await withRun(name, store, transactional, async (run) => {
          await run.fault('stalled', () => store.proxies.forEach((proxy) => proxy.freeze()));
          await untilOutcomes(run, (o) => o.phase === 'stalled', 8, STALL_MS, `${name}: answers during the stall`).catch(() => undefined);
          // Requests held for the whole stall (no answer yet): each is answered once the path heals.
          const waiting = run.apps.reduce((n, _app, i) => n + run.client.inFlight(i), 0);
          await run.heal();
          const probe = await run.probe();
          const report = await run.finish();
          for (const fault of run.faults) trace({ op: 'fault', ...fault });
          for (const o of run.client.outcomes)
            trace({
              op: 'outcome',
              key: o.key,
              app: o.app,
              status: o.status,
              start: o.startedAt,
              end: o.startedAt + o.durationMs,
              phase: o.phase,
            });
          for (const v of report.violations) trace({ op: 'violation', v });
          const stalled = run.outcomesIn('stalled');
          const unavailable = stalled.filter((o) => o.status === 503);
          const statuses = stalled.map((o) => `${o.status}/${o.durationMs}ms`).join(' ');
          return (
            `${name} stall (${run.longestFaultMs} ms, lease ${run.leaseTtl} ms): ${stalled.length} requests sent during it, ${unavailable.length}×503, slowest 503 ${Math.max(0, ...unavailable.map((o) => o.durationMs))} ms, ` +
            `${waiting} still waiting at the heal, ${stalled.filter((o) => o.status === 'timeout').length} unanswered in ${HANG_MS / 1000} s; probe after heal ${probe.status} in ${probe.durationMs} ms; ` +
            `unsettled ${report.unsettled.length}, violations ${report.violations.length} (${report.violations.slice(0, 3).join('; ')}), lease_lost ${run.leaseLost.length}; answers ${statuses}; store errors ${JSON.stringify([...new Set(run.storeErrors)].slice(0, 4))}`
          );
        }),
      );
    if (phases.includes('latency'))
      lines.push(
        await withRun(name, store, transactional, async (run) => {
          run.client.phase = 'none';
          await sleep(seconds * 1_000);
          await run.fault('slow', () => store.proxies.forEach((proxy) => proxy.latency({ ms: 200, jitterMs: 50, direction: 'reply' })));
          await sleep(seconds * 1_000);
          await run.heal();
          const report = await run.finish();
          const none = run.outcomesIn('none');
          const slow = run.outcomesIn('slow');
          return (
            `${name} latency: none ${(none.length / seconds).toFixed(0)} answers/s p99 ${p99(none)} ms; ` +
            `200±50 ms ${(slow.length / seconds).toFixed(0)} answers/s p99 ${p99(slow)} ms, ${slow.filter((o) => o.status === 503).length}×503; violations ${report.violations.length}`
          );
        }),
      );
    if (phases.includes('reset'))
      lines.push(
        await withRun(name, store, transactional, async (run) => {
          await run.fault('reset', () =>
            store.proxies.forEach((proxy) => proxy.resetMidReply({ afterBytes: 5, probability: 0.25, count: Infinity })),
          );
          await sleep(seconds * 1_000);
          const resets = store.proxies.reduce((n, proxy) => n + proxy.stats.reset, 0);
          await run.heal();
          const report = await run.finish();
          const during = run.outcomesIn('reset');
          return (
            `${name} reset: ${during.length} requests, ${resets} replies reset, ${during.filter((o) => o.status === 503).length}×503; ` +
            `keys ${report.stats.keys}, effects ${report.stats.effects}, violations ${report.violations.length} (${report.violations.slice(0, 2).join('; ')}), unsettled ${report.unsettled.length}`
          );
        }),
      );
  } finally {
    await store.dispose();
  }
  return lines;
}

async function main(): Promise<void> {
  const names = (process.argv[2] ?? Object.keys(STORES).join(',')).split(',');
  const seconds = Number(process.argv[3] ?? 3);
  const phases = (process.argv[4] ?? 'stall,latency,reset').split(',');
  for (const name of names) {
    if (!STORES[name]) throw new Error(`unknown store ${name}; one of ${Object.keys(STORES).join(', ')}`);
    for (const line of await measure(name, seconds, phases)) console.log(line);
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
