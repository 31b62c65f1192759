import { Registry } from 'prom-client';
import { MemoryIdempotencyStore, combineListeners, createIdempotencyLogger, makeIdempotent, step } from '../../lib/index.js';
import { createPrometheusListener } from '../../lib/prometheus/index.js';

/** step_completed / step_replayed reach the logger (debug, with the step name) and Prometheus (a counter by outcome). */
describe('durable steps in logs and metrics', () => {
  it('counts steps by outcome and logs them at debug with their name', async () => {
    const registry = new Registry();
    const lines: string[] = [];
    const logger = { log: () => undefined, warn: () => undefined, error: () => undefined, debug: (line: string) => lines.push(line) };
    let fail = true;
    const fn = makeIdempotent(
      async function pay(_id: string) {
        await step('charge', () => 1);
        if (fail) {
          fail = false;
          throw new Error('once');
        }
        await step('email', () => 2);
      },
      {
        store: new MemoryIdempotencyStore(),
        key: (id) => id,
        onEvent: combineListeners(createPrometheusListener({ registry }), createIdempotencyLogger({ logger })),
      },
    );
    await expect(fn('p')).rejects.toThrow('once');
    await fn('p');
    const metric = await registry.getSingleMetric('idempotency_steps_total')!.get();
    const byOutcome = Object.fromEntries(metric.values.map((v) => [v.labels.outcome, v.value]));
    expect(byOutcome).toEqual({ completed: 2, replayed: 1 });
    expect(lines.filter((l) => l.startsWith('step_'))).toEqual([
      expect.stringMatching(/^step_completed pay key=\S+ step=charge in/),
      expect.stringMatching(/^step_replayed pay key=\S+ step=charge in/),
      expect.stringMatching(/^step_completed pay key=\S+ step=email in/),
    ]);
  });
});
