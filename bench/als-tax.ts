/**
 * What the durable steps' context (an AsyncLocalStorage, `core/step-context.ts`) costs
 * every promise of the process: a million awaited promises timed before any execution,
 * while one `makeIdempotent` execution is open (awaiting a gate), after it settled, and
 * after the application entered an AsyncLocalStorage of its own. Medians of 3.
 *
 *   node -r ./test/support/ts-require.js bench/als-tax.ts
 *   BENCH_LIB=/tmp/before/lib node -r ./test/support/ts-require.js bench/als-tax.ts
 *
 * Before Node 24, an entered storage installs promise hooks for the whole process (Node
 * 20.20 on this machine: 61 -> 139-149 ms, about 80 ns per awaited promise, 10-15 µs
 * per request of any route); Node 24's AsyncLocalStorage has none (60 -> 61 ms). Since
 * the steps' context is disabled once no execution is open, the tax lasts only while one
 * is (bench/README.md, seventh round).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { describeLib, loadLibModule } from './lib.js';
import type * as Root from '../lib/index.js';

const { MemoryIdempotencyStore, makeIdempotent } = loadLibModule<typeof Root>('index.ts');

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
  const store = new MemoryIdempotencyStore();
  let openGate!: () => void;
  const gate = new Promise<void>((resolve) => (openGate = resolve));
  let measuredInside!: (ms: number) => void;
  const inside = new Promise<number>((resolve) => (measuredInside = resolve));
  const held = makeIdempotent(
    async () => {
      // The hook is process-wide: any code pays the same while the handler awaits its gate.
      setImmediate(() => void medianOf3().then(measuredInside));
      await gate;
      return 'done';
    },
    { store, key: () => 'held', scope: 'held' },
  );

  await awaitMany(1e6);
  const rows: Array<[string, number]> = [['before any execution', await medianOf3()]];
  const answer = held();
  rows.push(['while one execution is open', await inside]);
  openGate();
  await answer;
  rows.push(['after it settled', await medianOf3()]);
  new AsyncLocalStorage<number>().run(1, () => undefined);
  rows.push(['after the app entered a storage of its own (it stays on)', await medianOf3()]);

  console.log(`Node ${process.version}, ${describeLib()}: a million awaited promises, median of 3`);
  const base = rows[0][1];
  for (const [label, ms] of rows)
    console.log(`  ${label.padEnd(58)} ${ms.toFixed(0).padStart(5)} ms  (${(((ms - base) / 1e6) * 1e6).toFixed(0)} ns more each)`);
}

void main();
