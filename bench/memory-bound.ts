/**
 * Resident memory of the memory store under a stream of unique keys: RSS and heap
 * before, after `keys` unique executions, and after `keys` more. With `maxEntries`
 * the second batch must not grow memory: the oldest completed records are evicted.
 * Run by bench/run.ts in a fresh child process with --expose-gc; prints one JSON line.
 *
 *   node --expose-gc -r ./test/support/ts-require.js bench/memory-bound.ts '{"keys":100000,"maxEntries":10000}'
 */
import { loadLib } from './lib.js';
import { childMain } from './harness.js';

const { makeIdempotent, MemoryIdempotencyStore } = loadLib();

export interface MemoryBoundConfig {
  keys: number;
  maxEntries: number;
  /** Batches of `keys` unique keys, one after the other. */
  batches: number;
}

export interface MemorySnapshot {
  rssMB: number;
  heapUsedMB: number;
  entries: number;
}

export interface MemoryBoundResult {
  /** Unique keys per batch. */
  keys: number;
  maxEntries: number;
  before: MemorySnapshot;
  /** After each batch of `keys` new keys. */
  afterBatches: MemorySnapshot[];
}

const MB = 1024 * 1024;

export async function runMemoryBound(config: MemoryBoundConfig): Promise<MemoryBoundResult> {
  const store = new MemoryIdempotencyStore({ maxEntries: config.maxEntries });
  // A response of a realistic size (~150 bytes stored per record).
  const charge = async (order: { id: string; amount: number }) => ({
    id: `ch_${order.id}`,
    amount: order.amount,
    status: 'succeeded',
    currency: 'eur',
  });
  const chargeOnce = makeIdempotent(charge, { store, key: (order) => order.id, fingerprint: true });
  const snapshot = (): MemorySnapshot => {
    (globalThis as { gc?: () => void }).gc?.();
    const usage = process.memoryUsage();
    return { rssMB: Math.round(usage.rss / MB), heapUsedMB: Math.round(usage.heapUsed / MB), entries: store.size };
  };
  const batch = async (from: number) => {
    // 100 concurrent callers, as a busy process would have.
    const concurrency = 100;
    let next = from;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < from + config.keys) {
          const i = next++;
          await chargeOnce({ id: `order-${i}`, amount: i });
        }
      }),
    );
  };
  const before = snapshot();
  const afterBatches: MemorySnapshot[] = [];
  for (let b = 0; b < config.batches; b++) {
    await batch(b * config.keys);
    afterBatches.push(snapshot());
  }
  return { keys: config.keys, maxEntries: config.maxEntries, before, afterBatches };
}

if (require.main === module) childMain(runMemoryBound);
