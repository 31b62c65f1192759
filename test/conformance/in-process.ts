import { isDeepStrictEqual } from 'node:util';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyKeyMissingError,
  isIdempotencyError,
} from '../../lib/index.js';
import type { Answer, ReplayCase } from './conformance.js';
import { IN_FLIGHT, KEY_MISSING, MISMATCH } from './conformance.js';

/**
 * What in-process entry points share (provider methods, events, makeIdempotent,
 * IdempotencyService.run): the caller gets the value itself, or the error thrown.
 * There is no principal there (docs/concepts.md): the tenant goes into the key, so
 * a driver's principal is the tenant part of the key its key function builds.
 */
export type Seen = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown };

export async function seen(run: () => unknown): Promise<Seen> {
  try {
    return { ok: true, value: await run() };
  } catch (error) {
    return { ok: false, error };
  }
}

/** The first argument of every in-process handler of the drivers: who asks, and the client key. */
export interface Ask {
  readonly tenant?: string;
  readonly ref?: string;
}

/** The documented way to scope such keys by tenant; `undefined` (no key) when there is no ref. */
export const keyOfAsk = (ask: Ask): string | undefined =>
  ask.ref === undefined ? undefined : ask.tenant ? `${ask.tenant}:${ask.ref}` : ask.ref;

export function describeSeen(value: Seen): string {
  if (value.ok) return `the value ${String(value.value)}`;
  const error = value.error as Error;
  return `${error?.name}: ${error?.message}`;
}

export function answerOf(value: Seen): Answer {
  if (!value.ok) throw new Error(`expected an answer, the caller got ${describeSeen(value)}`);
  return value.value as Answer;
}

export function refusalOf(value: Seen): string | undefined {
  if (value.ok) return undefined;
  if (isIdempotencyError(value.error)) return value.error.code;
  throw new Error(`expected the library's refusal or an answer, the caller got ${describeSeen(value)}`);
}

const ERROR_CLASSES: Record<string, Function> = {
  [MISMATCH]: IdempotencyFingerprintMismatchError,
  [KEY_MISSING]: IdempotencyKeyMissingError,
  [IN_FLIGHT]: IdempotencyInFlightError,
};

/** In process, a refusal is the library's own error class, with its code and a hint saying how to fix it. */
export function expectLibraryError(value: Seen, code: string): void {
  expect(value.ok).toBe(false);
  const error = (value as { error: unknown }).error;
  expect(error).toBeInstanceOf(ERROR_CLASSES[code]);
  expect(error).toMatchObject({ code });
  expect(typeof (error as { hint?: unknown }).hint).toBe('string');
}

/** Values JSON cannot carry that a replay must give back as themselves (issue 24, item 2). */
export const RICH_VALUES: Record<string, (run: number) => unknown> = {
  Date: (run) => new Date(Date.UTC(2026, 0, 2, 3, 4, 5, run)),
  Map: (run) =>
    new Map<unknown, unknown>([
      ['run', run],
      [7, { nested: true }],
    ]),
  Set: (run) => new Set([run, 'two', 3]),
  bigint: (run) => 2n ** 70n + BigInt(run),
  Buffer: (run) => Buffer.from([0, 1, 2, 255, run]),
  'undefined, NaN, -0, Infinity': () => ({ u: undefined, nan: Number.NaN, negativeZero: -0, inf: -Infinity }),
  'all of them nested': (run) => ({
    at: [new Date(Date.UTC(2026, 0, 2, 3, 4, 5, run))],
    byId: new Map([['a', { amount: 10n, raw: Buffer.from('abc'), tags: new Set(['x']) }]]),
  }),
};

/** One replay case per rich value: the replay is the same value, with the same types, deeply. */
export function richReplays<I>(operation: string, inputOf: (kind: string) => I): ReplayCase<I, Seen>[] {
  return Object.keys(RICH_VALUES).map((kind) => ({
    name: `${kind}: the replay is the same value, of the same types`,
    operation,
    input: inputOf(kind),
    expectSame(first: Seen, replay: Seen) {
      expect(first.ok).toBe(true);
      if (!replay.ok) throw new Error(`the replay threw ${describeSeen(replay)}`);
      expect(replay.value).toStrictEqual((first as { value: unknown }).value);
      expect(isDeepStrictEqual(replay.value, (first as { value: unknown }).value)).toBe(true);
    },
  }));
}

/**
 * Issue 41, item 7: a public `currency` and the amount in a `#private` field. Its public
 * fields do not tell `new Money(500)` from `new Money(50000)`, so the fingerprint refuses it.
 */
export class Money {
  readonly currency = 'EUR';
  readonly #cents: number;
  constructor(cents: number) {
    this.#cents = cents;
  }
  get cents(): number {
    return this.#cents;
  }
}

/** The same Money with a toJSON() that says what identifies it: the fingerprint takes that. */
export class JsonMoney extends Money {
  toJSON() {
    return { currency: this.currency, cents: this.cents };
  }
}

/** Prices per SKU in a currency kept `#private`: its entries alone (a Map's fingerprint) would not tell EUR from USD. */
export class PriceList extends Map<string, number> {
  readonly #currency: string;
  constructor(currency: string, entries: ReadonlyArray<[string, number]>) {
    super(entries);
    this.#currency = currency;
  }
  toJSON() {
    return { currency: this.#currency, prices: Object.fromEntries(this) };
  }
}

/** Inputs that canonical JSON collapses (issue 24, item 8), besides plain ones. */
export const IN_PROCESS_INPUT_PAIRS = [
  { name: 'another amount', a: { amount: 1 } as unknown, b: { amount: 2 } as unknown },
  { name: 'a Map vs another Map', a: new Map([['amount', 1]]) as unknown, b: new Map([['amount', 2]]) as unknown },
  { name: 'a Set vs another Set', a: new Set([1]) as unknown, b: new Set([2]) as unknown },
  { name: 'a bigint vs another bigint', a: 1n as unknown, b: 2n as unknown },
  {
    name: 'a Money whose amount is #private, by its toJSON(), vs another amount',
    a: new JsonMoney(500) as unknown,
    b: new JsonMoney(50000) as unknown,
  },
  {
    name: 'a Map subclass whose currency is #private, by its toJSON(), vs another currency',
    a: new PriceList('EUR', [['sku', 1]]) as unknown,
    b: new PriceList('USD', [['sku', 1]]) as unknown,
  },
];

/** The error a handler throws and caches (`cacheErrors: (e) => e instanceof RangeError`). */
export class DeclinedError extends RangeError {
  readonly code = 'CARD_DECLINED';
  constructor(readonly run: number) {
    super(`card declined (run ${run})`);
    this.name = 'DeclinedError';
  }
}

/** `cacheErrors` as a predicate: documented to come back as the nearest built-in class of the error's chain. */
export const cachesDeclined = (error: unknown): boolean => error instanceof RangeError;
/** `cacheErrors` as the classes to cache: documented to come back as themselves. */
export const CACHED_CLASSES = [DeclinedError];

/**
 * A cached error is thrown again as the caller saw it the first time: name, message and
 * fields, and the class `comesBackAs` (the error's own class when `cacheErrors` lists it).
 */
export function cachedErrorReplay<I>(operation: string, input: I, comesBackAs: Function, how: string): ReplayCase<I, Seen> {
  return {
    name: `a cached error (cacheErrors: ${how}) is thrown again: name, message, fields, as a ${comesBackAs.name}`,
    operation,
    input,
    cachedError: true,
    expectSame(first: Seen, replay: Seen) {
      expect(first.ok).toBe(false);
      expect(replay.ok).toBe(false);
      const [original, again] = [(first as { error: Error }).error, (replay as { error: Error }).error];
      expect(original).toBeInstanceOf(DeclinedError);
      expect({ name: again.name, message: again.message, code: (again as DeclinedError).code, run: (again as DeclinedError).run }).toEqual({
        name: original.name,
        message: original.message,
        code: 'CARD_DECLINED',
        run: (original as DeclinedError).run,
      });
      expect(again).toBeInstanceOf(comesBackAs);
      expect(again).toBeInstanceOf(RangeError);
    },
  };
}
