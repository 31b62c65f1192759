/** The arithmetic the benchmarks share (medians, percentiles, rounding) and the speed gauge a published run records. */
/** Median of a non-empty list (the mean of the middle two for an even length). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** The p-th percentile (0–100) of unsorted values, nearest rank. */
export function percentile(values: ArrayLike<number>, p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/**
 * How fast this machine is right now: the time of a fixed piece of single-threaded work
 * (a million awaited promises, Node's hot path in every request). The load average does
 * not show a shared host that runs this VM slower (no steal reported, yet the same bare
 * route went from 142 to 180–400 µs of app CPU per request within one session), so runs
 * record this beside it, at their start and end, and a run whose gauge moved or sits well
 * above the machine's usual one (about 50 ms on the bench's 2-core VM) is not published.
 */
export async function speedGauge(): Promise<number> {
  const times: number[] = [];
  for (let run = 0; run < 3; run++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < 1_000_000; i++) await Promise.resolve(i);
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  times.sort((a, b) => a - b);
  return Math.round(times[1]);
}
