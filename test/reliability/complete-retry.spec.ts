import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore, type CompleteRequest, type IdempotencyEvent } from '../../lib/index.js';
import { IdempotencyEngine, storageKeyOf, type ExecutionPolicy } from '../../lib/core/index.js';

/** The memory store whose `complete` fails the first `failures` times, like a store that blips. */
class BlippingStore extends MemoryIdempotencyStore {
  completeCalls = 0;
  constructor(private failures: number) {
    super();
  }
  override complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    this.completeCalls++;
    if (this.failures > 0) {
      this.failures--;
      return Promise.reject(new Error('connection lost'));
    }
    return super.complete(key, token, request);
  }
}

async function eventually(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// Found by the invariant harness (Redis killed under load): a handler ran, the store
// failed to record its result, the client got its success, and once the lease ran out
// a retry ran the effect a second time. The engine now keeps trying to store the
// outcome while the lease is still its own.
describe('storing an outcome after a store blip', () => {
  function policy(store: MemoryIdempotencyStore, events: IdempotencyEvent[], leaseTtl: number): ExecutionPolicy {
    return {
      store,
      ttl: 60_000,
      leaseTtl,
      inFlight: 'reject',
      waitTimeout: 1_000,
      onStoreError: 'fail-closed',
      maxResponseBytes: 1_000_000,
      onEvent: (e) => events.push(e),
    };
  }

  it('retries the complete in the background until it lands, so a later duplicate replays instead of running again', async () => {
    const store = new BlippingStore(2);
    const events: IdempotencyEvent[] = [];
    const engine = new IdempotencyEngine();
    const key = storageKeyOf('test', randomUUID());
    let runs = 0;
    const first = await engine.execute({ key }, policy(store, events, 10_000), () => ++runs);
    expect(first).toEqual({ value: 1, replayed: false });
    await eventually(async () => (await store.get(key))?.status === 'completed');
    const again = await engine.execute({ key }, policy(store, events, 10_000), () => ++runs);
    expect(again).toEqual({ value: 1, replayed: true });
    expect(runs).toBe(1);
    expect(store.completeCalls).toBe(3);
    expect(events.filter((e) => e.type === 'store_error')).toHaveLength(2);
    expect(events.filter((e) => e.type === 'completed')).toHaveLength(1);
  });

  it('gives up once the lease it held has run out (another worker may own the key by then) and reports lease_lost', async () => {
    const store = new BlippingStore(1_000);
    const events: IdempotencyEvent[] = [];
    const engine = new IdempotencyEngine();
    const key = storageKeyOf('test', randomUUID());
    await engine.execute({ key }, policy(store, events, 300), () => 'done');
    await eventually(async () => events.some((e) => e.type === 'lease_lost'));
    const callsAtGiveUp = store.completeCalls;
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(store.completeCalls).toBe(callsAtGiveUp);
    expect(events.some((e) => e.type === 'completed')).toBe(false);
  });
});
