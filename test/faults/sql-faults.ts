/**
 * The fault suite of a SQL store (TypeOrmIdempotencyStore on PostgreSQL or MariaDB), in
 * both modes: claim / complete, and transactional (`@Idempotent({ transactional: true })`,
 * the effect a row written in the idempotent transaction). No store option is set: the
 * defaults must bound every answer. Called by one spec file per database.
 */
import { FaultRun } from './harness/run.js';
import { blackholedPath, figuresLine, resetReplies, slowPath, stalledPath } from './harness/scenarios.js';
import type { FaultStore, SqlFaultStoreOptions } from './harness/stores.js';

/**
 * The default statement deadline (4 s) for the claim, plus a handler's sleep (≤ 300 ms)
 * and one complete caught by the fault, plus slack for a shared 2-core machine.
 */
export const SQL_ANSWER_BOUND_MS = 7_000;

/*
 * The stalled path runs with no option set: the store's default deadline
 * (`statementTimeout`, 4 s) must answer every request, a claim caught by the stall within
 * 5 s end to end (`STALLED_503_BOUND_MS`; issue 42: with a 5 s deadline it took 5.07 s).
 * Before the deadline (issue 31) every request waited for the heal (no answer within 35 s).
 */
export const STALLED_503_BOUND_MS = 5_000;

export function describeSqlFaults(database: string, open: (options: SqlFaultStoreOptions) => Promise<FaultStore>): void {
  describe.each([
    { mode: 'claim / complete', transactional: false },
    { mode: 'transactional', transactional: true },
  ])(`network faults: TypeOrmIdempotencyStore on ${database}, $mode`, ({ transactional }) => {
    let store: FaultStore;
    let run: FaultRun | undefined;

    beforeAll(async () => {
      store = await open({ transactional });
    }, 60_000);
    afterAll(async () => {
      await store?.dispose();
    }, 30_000);
    beforeEach(async () => {
      run = new FaultRun(store, { answerBoundMs: SQL_ANSWER_BOUND_MS, transactional });
      await run.start();
    }, 30_000);
    afterEach(async () => {
      await Promise.all(store.proxies.map((proxy) => proxy.heal()));
      await run?.stop();
    }, 30_000);

    it('a stalled path: every request answered (503) within the bound, no handler twice, a request works right after the heal', async () => {
      const accepted = () => store.proxies.reduce((n, proxy) => n + proxy.stats.accepted, 0);
      const before = accepted();
      const figures = await stalledPath(run!);
      console.log(figuresLine(`${database} ${transactional ? 'tx' : 'plain'}`, 'stall', figures));
      expect(figures.during.slowest503Ms).toBeLessThan(STALLED_503_BOUND_MS);
      // The stuck connections were destroyed, not handed back to the pool: the pools had to open new ones.
      expect(accepted()).toBeGreaterThan(before);
    }, 90_000);

    it('a slow path (200 ± 50 ms per round trip): no 503, no handler twice', async () => {
      const figures = await slowPath(run!);
      console.log(figuresLine(`${database} ${transactional ? 'tx' : 'plain'}`, 'latency', figures));
    }, 90_000);

    it('replies reset mid-way: no handler twice, every key settles after the heal', async () => {
      const figures = await resetReplies(run!);
      console.log(figuresLine(`${database} ${transactional ? 'tx' : 'plain'}`, 'reset', figures));
    }, 90_000);

    // Issue 42: the connections open during the fault, and those opened while it lasts, drop
    // every byte for good. A transaction caught by it stays open on the server, with its
    // locks, until the server ends the session (PostgreSQL: idle_in_transaction_session_timeout,
    // MariaDB: idle_transaction_timeout, both set by the fault stores in transactional mode).
    it('a blackholed path: every request answered within the bound, no handler twice, a new key served within 5 s of the heal', async () => {
      const figures = await blackholedPath(run!);
      console.log(figuresLine(`${database} ${transactional ? 'tx' : 'plain'}`, 'blackhole', figures));
    }, 90_000);
  });
}
