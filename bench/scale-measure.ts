/**
 * The timed part of bench/scale.ts: claim, complete and replay through the store API (no
 * HTTP, no engine), each operation timed on its own, and a claim loop that runs while
 * something else (the purge) does.
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from '../lib/core/index.js';
import { round } from './stats.js';
import { populationKey } from './scale-sql.js';

/** Latency of one kind of operation, µs. */
export interface OpStats {
  n: number;
  p50: number;
  p99: number;
  mean: number;
  max: number;
}

export interface LatencyRun {
  concurrency: number;
  claim: OpStats;
  complete: OpStats;
  replay: OpStats;
}

/** What the operations write: the template's fingerprint and result, and the retention of the records. */
export interface Workload {
  fingerprint: string | undefined;
  result: string;
  ttl: number;
  /** A live completed record of the population to replay, its store key; undefined (an empty table): one this run completed. */
  replayKey: (() => string) | undefined;
}

/** The lease of a claim, as the engine's default. */
const LEASE_TTL = 30_000;

export function statsOf(micros: number[]): OpStats {
  const sorted = Float64Array.from(micros).sort();
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  const sum = micros.reduce((a, b) => a + b, 0);
  return {
    n: sorted.length,
    p50: round(at(0.5), 0),
    p99: round(at(0.99), 0),
    mean: round(sum / Math.max(1, sorted.length), 0),
    max: round(sorted[sorted.length - 1] ?? 0, 0),
  };
}

/** Runs `op(i)` for i in 0 .. n-1 from `concurrency` callers at once; the latency of each, µs. */
async function timed(n: number, concurrency: number, op: (i: number) => Promise<void>): Promise<number[]> {
  const micros = new Array<number>(n);
  let next = 0;
  const caller = async () => {
    for (let i = next++; i < n; i = next++) {
      const startedAt = process.hrtime.bigint();
      await op(i);
      micros[i] = Number(process.hrtime.bigint() - startedAt) / 1_000;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, caller));
  return micros;
}

let runs = 0;

/**
 * `ops` claims of new keys, the `ops` completions of those claims, then `ops` replays
 * (claims of live completed records, `workload.replayKey()`), each from `concurrency`
 * callers. A claim that does not claim, or a replay that does not find a completed
 * record, fails the run: the figures would be of another path.
 */
export async function measureLatency(store: IdempotencyStore, workload: Workload, ops: number, concurrency: number): Promise<LatencyRun> {
  const run = `${process.pid}-${++runs}-${Date.now()}`;
  const keys = Array.from({ length: ops }, (_, i) => populationKey(`new:${run}:`, i));
  const tokens = keys.map(() => randomUUID());
  const fingerprint = workload.fingerprint;
  const claim = statsOf(
    await timed(ops, concurrency, async (i) => {
      const answer = await store.claim(keys[i], { token: tokens[i], leaseTtl: LEASE_TTL, fingerprint });
      if (!answer.claimed) throw new Error(`the claim of new key ${keys[i]} did not claim`);
    }),
  );
  const complete = statsOf(
    await timed(ops, concurrency, async (i) => {
      if (!(await store.complete(keys[i], tokens[i], { result: workload.result, ttl: workload.ttl }))) {
        throw new Error(`the completion of ${keys[i]} lost its lease`);
      }
    }),
  );
  const pick = workload.replayKey ?? (() => keys[Math.floor(Math.random() * keys.length)]);
  const replayKeys = Array.from({ length: ops }, pick);
  const replay = statsOf(
    await timed(ops, concurrency, async (i) => {
      const answer = await store.claim(replayKeys[i], { token: randomUUID(), leaseTtl: LEASE_TTL, fingerprint });
      if (answer.claimed || answer.record.status !== 'completed')
        throw new Error(`the replay of ${replayKeys[i]} found no completed record`);
    }),
  );
  return { concurrency, claim, complete, replay };
}

export interface ClaimLoop {
  concurrency: number;
  /** Checked before each claim: true stops the loop (once `minOps` claims ran). */
  done: () => boolean;
  /** @default 0 */
  minOps?: number;
  /** @default 30_000 (the engine's default lease) */
  leaseTtl?: number;
}

/** Claims of new keys until `loop.done()`; their latencies, µs, and how many per second. */
export async function claimsUntil(
  store: IdempotencyStore,
  fingerprint: string | undefined,
  loop: ClaimLoop,
): Promise<{ stats: OpStats; perSecond: number; ms: number }> {
  const run = `${process.pid}-${++runs}-${Date.now()}`;
  const micros: number[] = [];
  const leaseTtl = loop.leaseTtl ?? LEASE_TTL;
  let next = 0;
  const startedAt = Date.now();
  const caller = async () => {
    while (!loop.done() || next < (loop.minOps ?? 0)) {
      const key = populationKey(`during:${run}:`, next++);
      const t0 = process.hrtime.bigint();
      const answer = await store.claim(key, { token: randomUUID(), leaseTtl, fingerprint });
      micros.push(Number(process.hrtime.bigint() - t0) / 1_000);
      if (!answer.claimed) throw new Error(`the claim of new key ${key} did not claim`);
    }
  };
  await Promise.all(Array.from({ length: loop.concurrency }, caller));
  const ms = Date.now() - startedAt;
  return { stats: statsOf(micros), perSecond: round((micros.length / ms) * 1000, 0), ms };
}

/** A few hundred of each operation, not recorded: connections opened, statements prepared, scripts loaded. */
export async function warmUp(store: IdempotencyStore, workload: Workload): Promise<void> {
  await measureLatency(store, workload, 200, 16);
  await measureLatency(store, workload, 50, 1);
}
