import { expectFaultRun, FaultRun, isSuccess, untilOutcomes } from './harness/run.js';
import { postgresFaultStore, type FaultStore } from './harness/stores.js';

// A stall judged against the lease (issue 31, R2): a path frozen for longer than what is
// left of a lease lets the leases of the handlers it caught run out (they can neither
// renew nor complete), and the clients' retries after the heal run those handlers again.
// That is the lease protocol as documented ("an outage longer than leaseTtl lets the lease
// run out"), so the fault runs refuse to judge such a run instead of counting its double
// runs as the fault's; a stall inside the lease must hold the invariant.
const LEASE_TTL = 3_000;

async function pollUntil(test: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('network faults: a stall judged against the lease (TypeOrmIdempotencyStore on PostgreSQL, claim / complete)', () => {
  let store: FaultStore;
  let run: FaultRun | undefined;

  beforeAll(async () => {
    store = await postgresFaultStore();
  }, 60_000);
  afterAll(async () => {
    await store?.dispose();
  }, 30_000);
  beforeEach(async () => {
    run = new FaultRun(store, { answerBoundMs: 15_000, leaseTtl: LEASE_TTL });
    await run.start();
    run.startLoad();
    await untilOutcomes(run, (o) => isSuccess(o.status), 20, 15_000, 'successes before the fault');
  }, 30_000);
  afterEach(async () => {
    await Promise.all(store.proxies.map((proxy) => proxy.heal()));
    await run?.stop();
  }, 30_000);

  async function stall(longerThanMs: number): Promise<void> {
    await run!.fault('stalled', () => store.proxies.forEach((proxy) => proxy.freeze()));
    const at = Date.now();
    // Something is caught by the freeze (a statement held), and the freeze has lasted long enough.
    await pollUntil(() => store.proxies[0].stats.heldBytes > 0 && Date.now() - at > longerThanMs, 10_000, 'a held statement');
    await run!.heal();
  }

  it('a stall past two thirds of the lease is not judged: the run says the lease, not the fault, ran the handlers again', async () => {
    await stall(LEASE_TTL + 200);
    const report = await run!.finish(8_000);
    expect(run!.faultOutlastedLease).toBe(true);
    expect(() => expectFaultRun(run!, report)).toThrow(/more than two thirds of the lease/);
  }, 60_000);

  it('a stall inside the lease: no handler twice, every key settles, nothing left unanswered', async () => {
    await stall(LEASE_TTL / 3);
    const report = await run!.finish(8_000);
    expect(run!.faultOutlastedLease).toBe(false);
    expect(run!.leaseLost).toEqual([]);
    expectFaultRun(run!, report);
  }, 60_000);
});
