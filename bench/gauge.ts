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
