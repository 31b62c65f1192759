import { IdempotencyConfigurationError } from './errors.js';
import { shown } from './options.js';

/** The size limit as an entry point was given it: its value and the name the user wrote. */
export interface SizeLimitOption {
  readonly value: unknown;
  /** `maxResponseBytes`, or the deprecated `maxResultBytes` when only that was written (messages name it). */
  readonly name: 'maxResponseBytes' | 'maxResultBytes';
}

/**
 * Reads the one size limit, `maxResponseBytes`, from options that also accept its
 * deprecated alias `maxResultBytes` (`makeIdempotent`, `TypeOrmIdempotencyStore`; the alias goes
 * in 1.0). Both written with different values is a mistake the library cannot settle,
 * so it refuses it. Not part of the public API.
 */
export function sizeLimitOf(
  owner: string,
  options: { readonly maxResponseBytes?: unknown; readonly maxResultBytes?: unknown },
): SizeLimitOption {
  const { maxResponseBytes, maxResultBytes } = options;
  if (maxResultBytes === undefined) return { value: maxResponseBytes, name: 'maxResponseBytes' };
  if (maxResponseBytes === undefined) return { value: maxResultBytes, name: 'maxResultBytes' };
  if (!Object.is(maxResponseBytes, maxResultBytes)) {
    throw new IdempotencyConfigurationError(
      `${owner}: maxResponseBytes (${shown(maxResponseBytes)}) and maxResultBytes (${shown(maxResultBytes)}) are one option under two names, given two values.`,
      'Keep maxResponseBytes only: maxResultBytes is its deprecated alias.',
    );
  }
  return { value: maxResponseBytes, name: 'maxResponseBytes' };
}
