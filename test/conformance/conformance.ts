import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore, isIdempotencyError, type ClaimRequest, type ClaimResult } from '../../lib/index.js';
import { CONFORMANCE_DRIVERS, type EntryId } from './drivers.js';
import { describeStepsCase, type StepsCase } from './steps-case.js';

/**
 * The transport conformance suite: what every entry point of the library must guarantee,
 * like `describeStoreContract` for stores. A driver boots one application of its entry
 * point against a store, calls the entry point as a given principal with a given key and
 * input, and reads what the caller saw. See README.md beside this file.
 */

export const MISMATCH = 'IDEMPOTENCY_FINGERPRINT_MISMATCH';
export const KEY_MISSING = 'IDEMPOTENCY_KEY_MISSING';
export const IN_FLIGHT = 'IDEMPOTENCY_REQUEST_IN_FLIGHT';
export const CONFIGURATION = 'IDEMPOTENCY_CONFIGURATION_ERROR';
/** The principal of a caller that is authenticated but whose identity cannot be read (a user without an id). */
export const UNREADABLE = '!';

/** A check that cannot apply to an entry point, with the reason (the registry test requires one). */
export interface NotApplicable {
  readonly notApplicable: string;
}

/** What a handler of a driver's application answers: which operation ran, for whom, and its run number. */
export interface Answer {
  readonly operation: string;
  readonly principal?: string;
  readonly run: number;
}

export interface Call<I> {
  /** One of the driver's operations (a route, a pattern, a queue, a method). */
  readonly operation: string;
  /** The client key; `undefined` sends none. */
  readonly key: string | undefined;
  /** Who asks; `undefined` is anonymous. */
  readonly principal?: string;
  /** Where the principal is carried, one of `principals.via` (e.g. `request.user`, `context.user`). */
  readonly via?: string;
  readonly input: I;
}

export interface ReplayCase<I, S> {
  readonly name: string;
  readonly operation: string;
  readonly input: I;
  /** Asserts that the replay is what the caller saw the first time (byte for byte where the entry point has bytes). */
  expectSame(first: S, replay: S): void;
  /** Text that the caller never saw and that must never reach the store. */
  readonly secrets?: readonly string[];
  /** The first answer is the handler's own error, cached (`cacheErrors`): no refusal, but no value either. */
  readonly cachedError?: boolean;
}

export interface SameNamesApp<S> {
  call(which: 'a' | 'b', key: string): Promise<S>;
  close(): Promise<void>;
}

export interface ConformanceDriver<I, S> {
  readonly entry: EntryId;
  /** Boots the application with `store` (or a store of its own, see `records`); called once, in beforeAll. */
  boot(store: ConformanceStore): Promise<void>;
  /** Every record of the driver's own store, serialized, when it does not use the suite's. */
  records?(): Promise<string[]>;
  close(): Promise<void>;
  /** Calls the entry point; a refusal is returned (as the caller saw it), never thrown. */
  call(call: Call<I>): Promise<S>;
  /** The handler's answer in what the caller saw; throws (naming what was seen) when it is no answer. */
  answerOf(seen: S): Answer;
  /** The library's refusal code in what the caller saw, read from the entry point's error shape; undefined for an answer. */
  refusalOf(seen: S): string | undefined;
  /** Asserts the whole error shape of the entry point for a refusal with `code`. */
  expectRefusalShape(seen: S, code: string): void;
  /** How often the handler of `operation` has run so far. */
  runs(operation: string): number;
  /** The input used where the check is not about inputs. */
  readonly input: I;
  /**
   * `failsClosed`: a caller whose principal is `UNREADABLE` (a user object without an id)
   * is refused with the configuration error, never served as anonymous.
   */
  readonly principals: { readonly operation: string; readonly via: readonly string[]; readonly failsClosed?: boolean } | NotApplicable;
  /** Pairs of operations that must never share a record under one key. */
  readonly operations: ReadonlyArray<{ readonly name: string; readonly a: string; readonly b: string }>;
  /**
   * Two handlers whose classes share a name (two feature modules), with the default scope,
   * in an application of their own: its boot must be refused with a configuration error
   * naming the fix, or the two must keep apart under one key.
   */
  readonly sameClassNames?: ReadonlyArray<{
    readonly name: string;
    boot(store: ConformanceStore): Promise<SameNamesApp<S>>;
  }>;
  readonly inputs:
    { readonly operation: string; readonly pairs: ReadonlyArray<{ readonly name: string; readonly a: I; readonly b: I }> } | NotApplicable;
  readonly replays: ReadonlyArray<ReplayCase<I, S>>;
  /** `missingKey`: whether the entry point can be called without a key (a refusal it must shape too). */
  readonly refusals: { readonly operation: string; readonly missingKey: boolean } | NotApplicable;
  /**
   * An operation that refuses a duplicate while the first call runs (`inFlight: 'reject'`),
   * and `hold()`, which keeps its next run open until the returned function is called.
   */
  readonly inFlight: { readonly operation: string; hold(): () => void } | NotApplicable;
  /** An operation whose handler awaits `stepProbe.run()` (test/conformance/steps.ts) before answering. */
  readonly steps: StepsCase<I> | NotApplicable;
}

/** What a driver's held operation awaits: `hold()` closes it for the next run, the returned function opens it. */
export class Hold {
  gate: Promise<void> | undefined;

  readonly hold = (): (() => void) => {
    let release!: () => void;
    this.gate = new Promise<void>((resolve) => (release = resolve));
    return () => {
      this.gate = undefined;
      release();
    };
  };
}

/**
 * The memory store, remembering every key it was asked for, so a test can read back
 * every record it holds (`records()`): what reached the store, not what was meant to.
 */
export class ConformanceStore extends MemoryIdempotencyStore {
  private readonly seen = new Set<string>();

  override claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    this.seen.add(key);
    return super.claim(key, request);
  }

  /** Every record held, serialized as the store returns it. */
  async records(): Promise<string[]> {
    const records: string[] = [];
    for (const key of this.seen) {
      const record = await this.get(key);
      if (record) records.push(JSON.stringify(record));
    }
    return records;
  }
}

export function isNotApplicable(value: unknown): value is NotApplicable {
  return typeof (value as NotApplicable | undefined)?.notApplicable === 'string';
}

/** The forms a secret could take in a stored record: as is, base64 (bytes), hex, JSON-escaped. */
function encodingsOf(secret: string): string[] {
  const bytes = Buffer.from(secret, 'utf8');
  return [secret, bytes.toString('base64'), bytes.toString('base64url'), bytes.toString('hex'), JSON.stringify(secret).slice(1, -1)];
}

/** Entry points that ran their suite in this process (the registry test reads it only through the registry). */
export function describeTransportConformance<I, S>(name: string, driver: ConformanceDriver<I, S>): void {
  if (!CONFORMANCE_DRIVERS[driver.entry]) throw new Error(`${driver.entry} is not registered in test/conformance/drivers.ts`);
  describe(`transport conformance: ${name}`, () => {
    const store = new ConformanceStore();
    let sequence = 0;
    const key = () => `conf-${driver.entry}-${++sequence}-${randomUUID().slice(0, 8)}`;

    beforeAll(() => driver.boot(store), 60_000);
    afterAll(() => driver.close(), 60_000);

    describe('1. two principals never share a record', () => {
      const principals = driver.principals;
      if (isNotApplicable(principals)) return;
      for (const via of principals.via) {
        it(`same key from alice and bob (principal in ${via}): both run, each gets their own answer`, async () => {
          const k = key();
          const operation = principals.operation;
          const before = driver.runs(operation);
          const alice = driver.answerOf(await driver.call({ operation, key: k, principal: 'alice', via, input: driver.input }));
          const bob = driver.answerOf(await driver.call({ operation, key: k, principal: 'bob', via, input: driver.input }));
          expect(driver.runs(operation) - before).toBe(2);
          expect(alice).toMatchObject({ operation, principal: 'alice' });
          expect(bob).toMatchObject({ operation, principal: 'bob' });
          // Each still gets their own answer back on a retry.
          const aliceAgain = driver.answerOf(await driver.call({ operation, key: k, principal: 'alice', via, input: driver.input }));
          expect(aliceAgain).toEqual(alice);
          expect(driver.runs(operation) - before).toBe(2);
        });
      }
    });

    describe('1. two principals never share a record (fail closed)', () => {
      const principals = driver.principals;
      if (isNotApplicable(principals) || !principals.failsClosed) return;
      for (const via of principals.via) {
        it(`a user whose id cannot be read (in ${via}) is refused, never served as anonymous`, async () => {
          const k = key();
          const operation = principals.operation;
          const anonymous = driver.answerOf(await driver.call({ operation, key: k, input: driver.input }));
          const before = driver.runs(operation);
          driver.expectRefusalShape(
            await driver.call({ operation, key: k, principal: UNREADABLE, via, input: driver.input }),
            CONFIGURATION,
          );
          expect(driver.runs(operation)).toBe(before);
          expect(anonymous.principal ?? undefined).toBeUndefined();
        });
      }
    });

    describe('2. two operations never share a record', () => {
      for (const pair of driver.operations) {
        it(`same key to ${pair.name}: both run, each answers for itself`, async () => {
          const k = key();
          const [beforeA, beforeB] = [driver.runs(pair.a), driver.runs(pair.b)];
          const a = driver.answerOf(await driver.call({ operation: pair.a, key: k, input: driver.input }));
          const b = driver.answerOf(await driver.call({ operation: pair.b, key: k, input: driver.input }));
          expect({ a: a.operation, b: b.operation }).toEqual({ a: pair.a, b: pair.b });
          expect({ a: driver.runs(pair.a) - beforeA, b: driver.runs(pair.b) - beforeB }).toEqual({ a: 1, b: 1 });
        });
      }
      for (const sameNames of driver.sameClassNames ?? []) {
        it(`${sameNames.name}, default scope: refused at boot with a configuration error, or kept apart`, async () => {
          let app: SameNamesApp<S>;
          try {
            app = await sameNames.boot(new ConformanceStore());
          } catch (error) {
            expect(isIdempotencyError(error) && error.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
            expect((error as { hint?: string }).hint).toMatch(/scope/);
            return;
          }
          try {
            const k = key();
            const answers: Answer[] = [];
            for (const which of ['a', 'b'] as const) {
              try {
                answers.push(driver.answerOf(await app.call(which, k)));
              } catch (error) {
                throw new Error(
                  `the application booted (no refusal), and ${which} did not answer for itself: ${(error as Error).message}`,
                  {
                    cause: error,
                  },
                );
              }
            }
            expect(answers[0].operation).not.toBe(answers[1].operation);
          } finally {
            await app.close();
          }
        });
      }
    });

    describe('3. distinct inputs never share a fingerprint', () => {
      const inputs = driver.inputs;
      if (isNotApplicable(inputs)) return;
      for (const pair of inputs.pairs) {
        it(`same key, ${pair.name}: the mismatch refusal, never a replay`, async () => {
          const k = key();
          const operation = inputs.operation;
          const before = driver.runs(operation);
          const first = driver.answerOf(await driver.call({ operation, key: k, input: pair.a }));
          const other = await driver.call({ operation, key: k, input: pair.b });
          expect(driver.refusalOf(other)).toBe(MISMATCH);
          expect(driver.runs(operation) - before).toBe(1);
          // The first input still replays.
          expect(driver.answerOf(await driver.call({ operation, key: k, input: pair.a }))).toEqual(first);
        });
      }
    });

    describe('4. a replay equals the first answer as the caller saw it', () => {
      for (const replay of driver.replays) {
        it(replay.name, async () => {
          const k = key();
          const before = driver.runs(replay.operation);
          const first = await driver.call({ operation: replay.operation, key: k, input: replay.input });
          if (!replay.cachedError) expect(driver.refusalOf(first)).toBeUndefined();
          const again = await driver.call({ operation: replay.operation, key: k, input: replay.input });
          expect(driver.runs(replay.operation) - before).toBe(1);
          // What the store holds first: a leak is a leak even if the replay hid it again.
          if (replay.secrets) {
            const records = driver.records ? await driver.records() : await store.records();
            expect(records.length).toBeGreaterThan(0);
            for (const secret of replay.secrets) {
              for (const form of encodingsOf(secret)) {
                expect(records.filter((record) => record.includes(form))).toEqual([]);
              }
            }
          }
          replay.expectSame(first, again);
        });
      }
    });

    describe("5. refusals use the entry point's error shape", () => {
      const refusals = driver.refusals;
      if (isNotApplicable(refusals)) return;
      it('a key reused with another input', async () => {
        const inputs = driver.inputs;
        const [a, b] = isNotApplicable(inputs) ? [driver.input, driver.input] : [inputs.pairs[0].a, inputs.pairs[0].b];
        const k = key();
        driver.answerOf(await driver.call({ operation: refusals.operation, key: k, input: a }));
        driver.expectRefusalShape(await driver.call({ operation: refusals.operation, key: k, input: b }), MISMATCH);
      });
      const inFlight = driver.inFlight;
      if (!isNotApplicable(inFlight)) {
        it('a key reused while its first call runs: the in-flight refusal (same input), the mismatch refusal (other input)', async () => {
          const inputs = driver.inputs;
          const [a, b] = isNotApplicable(inputs) ? [driver.input, driver.input] : [inputs.pairs[0].a, inputs.pairs[0].b];
          const k = key();
          const operation = inFlight.operation;
          const before = driver.runs(operation);
          const release = inFlight.hold();
          let first: Promise<S> | undefined;
          try {
            first = driver.call({ operation, key: k, input: a });
            const deadline = Date.now() + 10_000;
            while (driver.runs(operation) === before) {
              if (Date.now() > deadline) throw new Error(`the first call of ${operation} did not start within 10 s`);
              await new Promise((resolve) => setTimeout(resolve, 5));
            }
            driver.expectRefusalShape(await driver.call({ operation, key: k, input: a }), IN_FLIGHT);
            driver.expectRefusalShape(await driver.call({ operation, key: k, input: b }), MISMATCH);
          } finally {
            release();
          }
          driver.answerOf(await first);
          expect(driver.runs(operation) - before).toBe(1);
        });
      }
      if (refusals.missingKey) {
        it('no key', async () => {
          const before = driver.runs(refusals.operation);
          driver.expectRefusalShape(await driver.call({ operation: refusals.operation, key: undefined, input: driver.input }), KEY_MISSING);
          expect(driver.runs(refusals.operation)).toBe(before);
        });
      }
    });

    describeStepsCase(driver, key);
  });
}
