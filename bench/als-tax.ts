/**
 * What an enabled AsyncLocalStorage costs every promise of the process: a million awaited
 * promises timed before and after one `run()` (the first execution of an `@Idempotent()`
 * handler enters the durable steps' context, `core/step-context.ts`), medians of 3.
 *
 *   node -r ./test/support/ts-require.js bench/als-tax.ts
 *
 * Node 20 installs promise hooks once a store is entered (2026-12-04, this machine:
 * 61 → 149 ms, about 88 ns per awaited promise); Node 24's AsyncLocalStorage has none
 * (60 → 61 ms). A request that creates 100-150 promises pays about 10-15 µs on Node 20.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

async function awaitMany(n: number): Promise<number> {
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await new Promise<void>((resolve) => resolve());
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function medianOf3(): Promise<number> {
  const runs = [await awaitMany(1e6), await awaitMany(1e6), await awaitMany(1e6)];
  return runs.sort((a, b) => a - b)[1];
}

async function main(): Promise<void> {
  await awaitMany(1e6);
  const before = await medianOf3();
  new AsyncLocalStorage<number>().run(1, () => undefined);
  const after = await medianOf3();
  console.log(
    `Node ${process.version}: 1e6 awaited promises ${before.toFixed(0)} ms before an AsyncLocalStorage was entered, ` +
      `${after.toFixed(0)} ms after (${(((after - before) / 1e6) * 1e6).toFixed(0)} ns more each)`,
  );
}

void main();
