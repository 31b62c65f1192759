import { IdempotencyError, IdempotencyErrorCode } from '../../core/errors.js';

/**
 * A conditional write found the row at another version than the one the caller read
 * (someone else updated it in between), or found no row at all.
 */
export class OptimisticLockError extends IdempotencyError {
  /** Entity (class) name. */
  readonly entity: string;
  /** Primary key the update targeted. */
  readonly id: unknown;
  /** Version the caller expected; `undefined` for an entity without a version column (the state moved instead). */
  readonly expectedVersion: number | undefined;
  /** Version found in the database after the miss; `undefined` when the row does not exist. */
  readonly actualVersion: number | undefined;

  constructor(entity: string, id: unknown, expectedVersion: number | undefined, actualVersion: number | undefined, detail?: string) {
    const found = detail ?? (actualVersion === undefined ? 'the row does not exist (any more)' : `it is at version ${actualVersion}`);
    const expected = expectedVersion === undefined ? 'expected it unchanged' : `expected version ${expectedVersion}`;
    super(
      IdempotencyErrorCode.OptimisticLock,
      409,
      `${entity} ${describeId(id)} was changed concurrently: ${expected}, but ${found}.`,
      'Reload the entity and apply the change again (retryOnOptimisticLock does this for you), or report a conflict to the client.',
      { title: 'Concurrent update' },
    );
    this.entity = entity;
    this.id = id;
    this.expectedVersion = expectedVersion;
    this.actualVersion = actualVersion;
  }
}

export { IllegalStateTransitionError } from '../../state-machine/state-machine-error.js';

function describeId(id: unknown): string {
  if (id !== null && typeof id === 'object') {
    try {
      return JSON.stringify(id);
    } catch {
      return String(id);
    }
  }
  return `#${String(id)}`;
}
