import type { ConformanceDriver, NotApplicable } from './conformance.js';
import type { StepProbe } from './steps.js';

/** A driver's operation whose handler awaits `probe.run()` before answering, and that probe. */
export interface StepsCase<I> {
  readonly operation: string;
  readonly probe: StepProbe;
  /** The input of its calls; the driver's `input` when absent. */
  readonly input?: I;
  /** The transport retries a failed call by itself (BullMQ's attempts): the first call already answers, resumed. */
  readonly retriedByTransport?: boolean;
}

/**
 * 6. Durable steps (issue 27): inside the entry point, `step()` and `stepKey()` find the
 * execution; a call that fails after its first step is retried with the same key and
 * resumes after it (the first step's effect once, its recorded result returned), and a
 * later call replays without running a step.
 */
export function describeStepsCase<I, S>(driver: ConformanceDriver<I, S>, key: () => string): void {
  describe('6. durable steps resume after the finished ones', () => {
    const steps = driver.steps as StepsCase<I> | NotApplicable;
    if ('notApplicable' in steps) return;
    it('a call failing after step 1 is retried with the same key: step 1 runs once, step 2 runs again, a later call replays', async () => {
      const { operation, probe } = steps;
      const input = steps.input ?? driver.input;
      const k = key();
      const [charges, notifies, before] = [probe.charges.length, probe.notifies, driver.runs(operation)];
      probe.failNextNotify();
      if (steps.retriedByTransport) {
        driver.answerOf(await driver.call({ operation, key: k, input }));
      } else {
        const failed = await driver.call({ operation, key: k, input });
        expect(() => driver.answerOf(failed)).toThrow();
        expect(probe.charges.length - charges).toBe(1);
        expect(probe.notifies - notifies).toBe(0);
        driver.answerOf(await driver.call({ operation, key: k, input }));
      }
      expect(probe.charges.length - charges).toBe(1);
      expect(probe.notifies - notifies).toBe(1);
      const runs = driver.runs(operation) - before;
      // A replay, or a skipped duplicate (a tick): no step runs either way.
      await driver.call({ operation, key: k, input });
      expect(driver.runs(operation) - before).toBe(runs);
      expect(probe.charges.length - charges).toBe(1);
      expect(probe.notifies - notifies).toBe(1);
      // The key handed to the step is stepKey('charge'), the same on both attempts, printable, without the client key.
      const [first, second] = probe.keysSeen.slice(-2);
      expect(first).toBe(second);
      expect(probe.charges[probe.charges.length - 1]).toBe(first);
      expect(first).toMatch(/^step_[A-Za-z0-9_-]{43}$/);
      expect(first).not.toContain(k);
    });
  });
}
