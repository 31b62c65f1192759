/**
 * `makeIdempotent` without HTTP: calls per second of one wrapped async function, with
 * `concurrency` callers at once, interleaved with the bare function in the same process.
 * Run by bench/run.ts in a child process; prints one JSON line.
 *
 *   node -r ./test/support/ts-require.js bench/functions.ts '{"stores":["memory"],"durationMs":1000,"rounds":3,"concurrency":50,"runId":"x"}'
 */
import { loadLib } from './lib.js';
import { median } from './stats.js';
import { openStores, type BenchStore, type StoreName } from './stores.js';
import { childMain } from './harness.js';

const { makeIdempotent } = loadLib();

export interface FunctionsConfig {
  stores: StoreName[];
  durationMs: number;
  rounds: number;
  concurrency: number;
  runId: string;
  autoPipelining?: boolean;
  redisUrl?: string;
}

export interface FunctionsCaseResult {
  /** Median over rounds. */
  callsPerSecond: number;
  /** Median over rounds of the same figure for the bare function, measured just before. */
  bareCallsPerSecond: number;
  /** Median added time per call, µs (1e6/store − 1e6/bare, at the given concurrency). */
  addedMicrosPerCall: number;
  /** Store calls per wrapped call, counted. */
  storeCallsPerCall: number;
  rounds: number[];
}

export type FunctionsResult = Partial<Record<StoreName, { first: FunctionsCaseResult; replay: FunctionsCaseResult }>>;

/** The work being made idempotent: async, tiny, allocation like a real handler's. */
async function charge(order: { id: string; amount: number }): Promise<{ id: string; amount: number }> {
  return { id: `ch_${order.id}`, amount: order.amount };
}

/** Runs `call(i)` from `concurrency` loops for `durationMs`; returns calls per second. */
async function drive(call: (i: number) => Promise<unknown>, durationMs: number, concurrency: number): Promise<number> {
  let done = 0;
  let next = 0;
  const started = performance.now();
  const end = started + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await call(next++);
        done++;
      }
    }),
  );
  return (done * 1000) / (performance.now() - started);
}

function totalCalls(store: BenchStore): number {
  const c = store.store.counts;
  return c.claim + c.complete + c.release + c.renew + c.get + c.delete;
}

export async function runFunctions(config: FunctionsConfig): Promise<FunctionsResult> {
  const stores = await openStores(config.stores, {
    runId: `${config.runId}fn`,
    autoPipelining: config.autoPipelining,
    redisUrl: config.redisUrl,
  });
  const result: FunctionsResult = {};
  try {
    const samples = new Map<string, { store: number[]; bare: number[]; calls: number[] }>();
    const sample = (id: string) => samples.get(id) ?? samples.set(id, { store: [], bare: [], calls: [] }).get(id)!;
    const bare = (i: number) => charge({ id: String(i), amount: i });
    // Warm-up so that the first round is not the one that pays for JIT compilation.
    await drive(bare, Math.min(300, config.durationMs), config.concurrency);
    for (let round = 0; round < config.rounds; round++) {
      for (const s of stores) {
        const wrapped = makeIdempotent(charge, { store: s.store, key: (order) => order.id, scope: `charge-${config.runId}-${round}` });
        for (const kind of ['first', 'replay'] as const) {
          if (round === 0) await drive((i) => wrapped({ id: kind === 'first' ? `w${i}` : 'warm', amount: 1 }), 200, config.concurrency);
          const bareRate = await drive(bare, config.durationMs, config.concurrency);
          const before = totalCalls(s);
          let calls = 0;
          const rate = await drive(
            (i) => {
              calls++;
              return wrapped({ id: kind === 'first' ? `${kind}-${i}` : 'one-key', amount: 1 });
            },
            config.durationMs,
            config.concurrency,
          );
          const entry = sample(`${s.name}:${kind}`);
          entry.store.push(rate);
          entry.bare.push(bareRate);
          entry.calls.push((totalCalls(s) - before) / calls);
        }
      }
    }
    for (const s of stores) {
      const summarize = (kind: 'first' | 'replay'): FunctionsCaseResult => {
        const e = sample(`${s.name}:${kind}`);
        return {
          callsPerSecond: Math.round(median(e.store)),
          bareCallsPerSecond: Math.round(median(e.bare)),
          addedMicrosPerCall: round2(median(e.store.map((rate, i) => 1e6 / rate - 1e6 / e.bare[i]))),
          storeCallsPerCall: round2(median(e.calls)),
          rounds: e.store.map(Math.round),
        };
      };
      result[s.name] = { first: summarize('first'), replay: summarize('replay') };
    }
  } finally {
    for (const s of stores) await s.close().catch(() => undefined);
  }
  return result;
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

if (require.main === module) childMain(runFunctions);
