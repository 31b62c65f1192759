import type { Attributes, Meter, ObservableCallback, ObservableResult } from '@opentelemetry/api';

/** One observation of an observable instrument at a collection. */
export interface Observation {
  readonly value: number;
  readonly attributes: Attributes;
}

/** An observable gauge as the listener created it, with its callbacks. */
export interface RecordedGauge {
  readonly name: string;
  readonly unit?: string;
  readonly description?: string;
  readonly callbacks: ObservableCallback[];
}

/**
 * The part of an OpenTelemetry `Meter` the library's listener uses (observable gauges),
 * collecting on demand as a metric reader does: `collect()` runs every callback and
 * returns what each instrument observed. The SDK's metrics package is not a dependency of
 * this repository; this holds to the API's contract (`@opentelemetry/api`), which is all
 * the listener sees. Any other instrument the listener asked for would throw.
 */
export class RecordingMeter {
  readonly instruments = new Map<string, RecordedGauge>();

  /** This recorder as the API's `Meter` type. */
  get meter(): Meter {
    const instruments = this.instruments;
    const unsupported = (what: string) => () => {
      throw new Error(`RecordingMeter: ${what} is not recorded`);
    };
    return {
      createObservableGauge(name: string, options: { unit?: string; description?: string } = {}) {
        const instrument: RecordedGauge = { name, unit: options.unit, description: options.description, callbacks: [] };
        instruments.set(name, instrument);
        return {
          addCallback: (callback: ObservableCallback) => void instrument.callbacks.push(callback),
          removeCallback: (callback: ObservableCallback) => void instrument.callbacks.splice(instrument.callbacks.indexOf(callback), 1),
        };
      },
      createCounter: unsupported('createCounter'),
      createHistogram: unsupported('createHistogram'),
      createUpDownCounter: unsupported('createUpDownCounter'),
      createGauge: unsupported('createGauge'),
      createObservableCounter: unsupported('createObservableCounter'),
      createObservableUpDownCounter: unsupported('createObservableUpDownCounter'),
      addBatchObservableCallback: unsupported('addBatchObservableCallback'),
      removeBatchObservableCallback: unsupported('removeBatchObservableCallback'),
    } as unknown as Meter;
  }

  /** Runs every callback of `name`, as a collection would; undefined when no such instrument was created. */
  async collect(name: string): Promise<Observation[] | undefined> {
    const instrument = this.instruments.get(name);
    if (!instrument) return undefined;
    const observations: Observation[] = [];
    const result: ObservableResult = { observe: (value, attributes = {}) => void observations.push({ value, attributes }) };
    for (const callback of instrument.callbacks) await callback(result);
    return observations;
  }
}
