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

/** A state machine refused a transition. */
export class IllegalStateTransitionError extends IdempotencyError {
  readonly from: string;
  readonly to: string;
  /** The states `from` may move to (empty for a final or unknown state). */
  readonly allowed: readonly string[];
  /** Name of the state machine, when it was given one. */
  readonly machine: string | undefined;

  constructor(from: string, to: string, allowed: readonly string[], machine?: string) {
    const subject = machine ? `${machine}: ` : '';
    const targets =
      allowed.length > 0 ? `allowed from '${from}': ${allowed.map((s) => `'${s}'`).join(', ')}` : `no transition leaves '${from}'`;
    super(
      IdempotencyErrorCode.IllegalTransition,
      409,
      `${subject}illegal transition from '${from}' to '${to}' (${targets}).`,
      `Only request transitions the state machine declares; reload the entity to see its current state.`,
      { title: 'Illegal state transition' },
    );
    this.from = from;
    this.to = to;
    this.allowed = allowed;
    this.machine = machine;
  }
}

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
