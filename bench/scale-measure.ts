/**
 * The timed part of bench/scale.ts: claim, complete and replay through the store API (no
 * HTTP, no engine), each operation timed on its own, and the purge of expired records
 * while claims run. The population's key format (`populationKey`) is here because the
 * fills and the replays must derive the same keys.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { IdempotencyStore } from '../lib/core/index.js';
import { round } from './stats.js';

/**
 * The store key of row `i` of a population: base64url SHA-256, the shape (and length,
 * 43 characters) of every key the library stores. The SQL fill computes the same in SQL.
 */
export function populationKey(population: string, i: number): string {
  return createHash('sha256')
    .update(population + i)
    .digest('base64url');
}

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

/** The claims of one window (before, during or after a purge). */
export interface ClaimsWindow {
  stats: OpStats;
  perSecond: number;
  ms: number;
}

const PURGE_CONCURRENCY = 16;

/**
 * Claims of new keys from 16 callers until `done()` (and at least 500 of them); their
 * latencies, µs, and how many per second. The claims hold day-long leases, so that none
 * expires while a purge runs: with 30 s, then 10 min, a slower purge (MariaDB beside 16
 * claimers: about 1 300 rows/s) had claims expiring as fast as it deleted them, and never ended.
 */
async function claimsUntil(store: IdempotencyStore, fingerprint: string | undefined, done: () => boolean): Promise<ClaimsWindow> {
  const run = `${process.pid}-${++runs}-${Date.now()}`;
  const micros: number[] = [];
  let next = 0;
  const startedAt = Date.now();
  const caller = async () => {
    while (!done() || next < 500) {
      const key = populationKey(`during:${run}:`, next++);
      const t0 = process.hrtime.bigint();
      const answer = await store.claim(key, { token: randomUUID(), leaseTtl: 86_400_000, fingerprint });
      micros.push(Number(process.hrtime.bigint() - t0) / 1_000);
      if (!answer.claimed) throw new Error(`the claim of new key ${key} did not claim`);
    }
  };
  await Promise.all(Array.from({ length: PURGE_CONCURRENCY }, caller));
  const ms = Date.now() - startedAt;
  return { stats: statsOf(micros), perSecond: round((micros.length / ms) * 1000, 0), ms };
}

/** Claims for `ms` milliseconds. */
function claimsFor(store: IdempotencyStore, fingerprint: string | undefined, ms: number): Promise<ClaimsWindow> {
  const end = Date.now() + ms;
  return claimsUntil(store, fingerprint, () => Date.now() >= end);
}

export interface PurgeFigures {
  expired: number;
  live: number;
  fillMs: number;
  /** Rows the purge deleted, how long it took, rows per second. */
  deleted: number;
  purgeMs: number;
  rowsPerSecond: number;
  batchSize: number;
  before: ClaimsWindow;
  during: ClaimsWindow;
  after: ClaimsWindow;
  /** Claims' p99 during the purge ÷ the mean of before and after. */
  p99Ratio: number;
  /** Expired rows left once the purge returned (0 expected). */
  expiredLeft: number;
}

/** A SQL store with its purge (Redis has none: its own key expiry forgets a record). */
export type PurgingStore = IdempotencyStore & { purgeExpired(): Promise<{ ran: boolean; deleted: number }>; purgeBatchSize: number };

/**
 * The store's own `purgeExpired()` (batches of at most `purgeBatchSize` under its
 * advisory lock) on a table filled with expired and live records, and claims before,
 * during and after it. `expiredLeft()` counts what the purge left behind.
 */
export async function measurePurge(
  store: PurgingStore,
  fingerprint: string | undefined,
  windowMs: number,
  expiredLeft: () => Promise<number>,
): Promise<Omit<PurgeFigures, 'expired' | 'live' | 'fillMs'>> {
  await claimsFor(store, fingerprint, 1_000);
  const before = await claimsFor(store, fingerprint, windowMs);
  let purged: { ran: boolean; deleted: number } | undefined;
  let failure: unknown;
  const startedAt = Date.now();
  const purge = store.purgeExpired().then(
    (result) => (purged = result),
    (error: unknown) => (failure = error),
  );
  const during = await claimsUntil(store, fingerprint, () => purged !== undefined || failure !== undefined);
  await purge;
  if (failure) throw failure;
  const purgeMs = Date.now() - startedAt;
  if (!purged?.ran) throw new Error('purgeExpired() did not run (another purge held the lock)');
  const after = await claimsFor(store, fingerprint, windowMs);
  return {
    deleted: purged.deleted,
    purgeMs,
    rowsPerSecond: round((purged.deleted / purgeMs) * 1000, 0),
    batchSize: store.purgeBatchSize,
    before,
    during,
    after,
    p99Ratio: round(during.stats.p99 / ((before.stats.p99 + after.stats.p99) / 2), 2),
    expiredLeft: await expiredLeft(),
  };
}

/** A few hundred of each operation, not recorded: connections opened, statements prepared, scripts loaded. */
export async function warmUp(store: IdempotencyStore, workload: Workload): Promise<void> {
  await measureLatency(store, workload, 200, 16);
  await measureLatency(store, workload, 50, 1);
}
