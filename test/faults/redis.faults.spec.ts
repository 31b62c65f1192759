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

  // 150 ± 50 ms here (bench/faults.ts measures 200 ± 50): a Cluster command can take two
  // round trips (a script not yet loaded on a node), which must stay inside the 1 s
  // commandTimeout of recommendedRedisClusterOptions() on a loaded 2-core machine too.
  it('a slow path (150 ± 50 ms per round trip): no 503, no handler twice', async () => {
    const figures = await slowPath(run!, { ms: 150, jitterMs: 50 });
    console.log(figuresLine(store.name, 'latency', figures));
  }, 60_000);

  // A claim whose reply is reset is resent by ioredis after it reconnects: the claim
  // script recognises its own token, so the key is not left answering 409 for a lease.
  it('replies reset mid-way: no handler twice, every key settles after the heal', async () => {
    const figures = await resetReplies(run!);
    console.log(figuresLine(store.name, 'reset', figures));
  }, 60_000);
});
