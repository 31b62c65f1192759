import { step, stepKey } from '../../lib/index.js';

/**
 * What the durable steps case of the suite (`6.`) runs inside a driver's steps operation:
 * two steps, the second failing once when told to. Each suite file has its own (Jest
 * loads modules per file).
 */
export class StepProbe {
  /** The key each run of the `charge` step was handed. */
  readonly charges: string[] = [];
  notifies = 0;
  private failures = 0;
  /** `stepKey('charge')` as the handler saw it, per run of the handler. */
  readonly keysSeen: string[] = [];

  /** The next run of the handler fails in its second step, after the first one finished. */
  failNextNotify(): void {
    this.failures++;
  }

  /** The steps a driver's handler awaits before answering. */
  async run(): Promise<void> {
    this.keysSeen.push(stepKey('charge'));
    const charge = await step('charge', (key) => {
      this.charges.push(key);
      return { id: `ch_${this.charges.length}`, at: new Date(Date.UTC(2026, 0, 1)) };
    });
    if (!(charge.at instanceof Date)) throw new Error('the recorded step result lost its Date');
    await step('notify', () => {
      if (this.failures > 0) {
        this.failures--;
        throw new Error('notify failed');
      }
      this.notifies++;
    });
  }
}

export const stepProbe = new StepProbe();
