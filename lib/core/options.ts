import { IdempotencyConfigurationError } from './errors.js';

/**
 * The one rule for numeric options, everywhere in the library: durations are whole
 * milliseconds and counts whole numbers (a fractional `ttl` would pass here and be
 * refused by PostgreSQL's `bigint`, or rounded differently by each store), within safe
 * integers, at least `min`. A mistake is an `IdempotencyConfigurationError` that names
 * the owner (`withLock`, `@Idempotent() on A.b`, `MemoryIdempotencyStore`) and the fix.
 *
 * Not part of the public API: each entry point calls it on its own options.
 */
export function checkWholeNumber(
  owner: string,
  name: string,
  value: unknown,
  options: {
    /** Smallest accepted value. @default 1 */
    readonly min?: number;
    /** `'ms'` for durations (the messages say milliseconds). @default 'count' */
    readonly unit?: 'ms' | 'count';
    /** An example for the hint, e.g. `'30_000'`. */
    readonly example?: string;
  } = {},
): void {
  if (value === undefined) return;
  const min = options.min ?? 1;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= min) return;
  const what = options.unit === 'ms' ? `a whole number of milliseconds` : 'a whole number';
  const bound = min === 1 ? 'above 0' : min === 0 ? '0 or more' : `of at least ${min}`;
  throw new IdempotencyConfigurationError(
    `${owner}: ${name} must be ${what} ${bound}, got ${shown(value)}.`,
    options.example
      ? `Write ${name}: ${options.example}${options.unit === 'ms' ? ' (ms)' : ''}.`
      : `Give ${name} as a whole number ${bound}.`,
  );
}

/** A value as the user wrote it: `"1000"` (a string) must not read as `1000`. */
export function shown(value: unknown): string {
  if (typeof value === 'string') return `${JSON.stringify(value)} (a string)`;
  if (typeof value === 'bigint') return `${value}n`;
  return String(value);
}
