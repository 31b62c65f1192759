import { FaultRun } from './harness/run.js';
import { blackholedPath, figuresLine, stalledPath } from './harness/scenarios.js';
import { nodeRedisClusterFaultStore, nodeRedisFaultStore } from './harness/node-redis-stores.js';
import type { FaultStore } from './harness/stores.js';

// RedisIdempotencyStore on node-redis 6 with recommendedNodeRedisOptions() (standalone)
// and recommendedNodeRedisClusterOptions() (Cluster), two instances, the store's defaults.
// node-redis has no reply timeout of its own: the store's timeout (2 s) bounds a call,
// plus one for a complete caught by the fault.
const ANSWER_BOUND_MS = 5_000;

describe.each([
  { name: 'node-redis', open: nodeRedisFaultStore },
  { name: 'node-redis Cluster', open: nodeRedisClusterFaultStore },
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

  it('a stalled path: every request answered (503) within the bound, no handler twice, keys usable after the heal', async () => {
    const figures = await stalledPath(run!);
    console.log(figuresLine(store.name, 'stall', figures));
  }, 60_000);

  // Issue 42: before, the client stayed on its dead connection (503 on every request for good).
  it('a blackholed path: every request answered within the bound, no handler twice, a new key served within 5 s of the heal', async () => {
    const figures = await blackholedPath(run!);
    console.log(figuresLine(store.name, 'blackhole', figures));
  }, 60_000);
});
