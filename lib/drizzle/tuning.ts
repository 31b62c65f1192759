import { checkWholeNumber } from '../core/options.js';
import { IdempotencyConfigurationError } from '../core/errors.js';
import type { DrizzleTransactionTuning } from './store-options.js';

const ISOLATION_LEVELS = ['READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE'];

/** Refuses a `DrizzleTransactionTuning` value outside the rules of the options. */
export function checkDrizzleTuning(owner: string, tuning: DrizzleTransactionTuning): void {
  checkWholeNumber(owner, 'waitTimeout', tuning.waitTimeout, { unit: 'ms', min: 0, example: '4_000' });
  checkWholeNumber(owner, 'statementTimeout', tuning.statementTimeout, { unit: 'ms', min: 0, example: '4_000' });
  if (tuning.isolationLevel !== undefined && !ISOLATION_LEVELS.includes(tuning.isolationLevel)) {
    throw new IdempotencyConfigurationError(
      `${owner}: isolationLevel must be one of ${ISOLATION_LEVELS.map((level) => `'${level}'`).join(', ')}, got ${JSON.stringify(tuning.isolationLevel)}.`,
      "Pass 'READ COMMITTED' (the default on PostgreSQL) unless the work needs a stricter level.",
    );
  }
}
