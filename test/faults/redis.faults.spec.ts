import { FaultRun } from './harness/run.js';
import { figuresLine, resetReplies, slowPath, stalledPath } from './harness/scenarios.js';
import { redisClusterFaultStore, redisFaultStore, type FaultStore } from './harness/stores.js';

// RedisIdempotencyStore with the documented client settings (recommendedRedisOptions(),
// recommendedRedisClusterOptions()) and the store's defaults, two instances, through
// proxies that stall, slow or reset the path. The bound of an answer: the client's
// commandTimeout (1 s) for the claim, plus one for a complete caught by the fault.
const ANSWER_BOUND_MS = 4_000;

describe.each([
  { name: 'Redis', open: redisFaultStore },
  { name: 'Redis Cluster', open: redisClusterFaultStore },
])('network faults: $name', ({ open }) => {
  let store: FaultStore;
  let run: FaultRun | undefined;

  beforeAll(async () => {
    store = await open();
  }, 60_000);
  afterAll(async () => {
    await store?.dispose();
  }, 30_000);
  beforeEach(async () => {
    run = new FaultRun(store, { answerBoundMs: ANSWER_BOUND_MS });
    await run.start();
  }, 30_000);
  afterEach(async () => {
    await run?.stop();
    await Promise.all(store.proxies.map((proxy) => proxy.heal()));
  }, 30_000);

  it('a stalled path: every request answered (503) within the bound, no handler twice, keys usable and the client working right after the heal', async () => {
    const figures = await stalledPath(run!);
    console.log(figuresLine(store.name, 'stall', figures));
  }, 60_000);

  it('a slow path (200 ± 50 ms per round trip): no 503, no handler twice', async () => {
    const figures = await slowPath(run!);
    console.log(figuresLine(store.name, 'latency', figures));
  }, 60_000);

  // KNOWN FAILURE, fix requested (see /tmp/notes/faults.md, R1): a claim whose reply is
  // reset is resent by ioredis after it reconnects (maxRetriesPerRequest: 1), the resent
  // claim finds the record its first run wrote under the same token and answers "not
  // claimed", so the key answers 409 for a whole lease. Turn `it.failing` back into `it`
  // once the claim recognises its own token.
  it.failing(
    'replies reset mid-way: no handler twice, every key settles after the heal',
    async () => {
      const figures = await resetReplies(run!);
      console.log(figuresLine(store.name, 'reset', figures));
    },
    60_000,
  );
});
