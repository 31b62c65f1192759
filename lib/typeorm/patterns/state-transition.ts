import type { EntityManager, EntityTarget, ObjectLiteral } from 'typeorm';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { OptimisticLockError } from './errors.js';
import { findLatestRow } from './latest-row.js';
import { primaryWhere, versionColumnOf, type EntityChanges, type EntityId } from './optimistic-lock.js';
import type { StateMachine } from '../../state-machine/state-machine.js';

/** Options of `applyTransition`. */
export interface ApplyTransitionOptions<T extends ObjectLiteral> {
  /**
   * Property holding the state.
   * @default 'status'
   */
  stateProperty?: string;
  /**
   * The state the caller read. With `expectedVersion`, the transition is checked against
   * what the caller saw; without, the row is read first.
   * @default read from the row
   */
  from?: string;
  /**
   * The version the caller read (entities with a version column).
   * @default read from the row together with `from`
   */
  expectedVersion?: number;
  /**
   * Other columns to set in the same UPDATE, e.g. `{ paidAt: Date.now() }`.
   * @default {}
   */
  changes?: EntityChanges<T>;
}

/** What `applyTransition` did: moved the row, or found it already in the target state. */
export interface TransitionOutcome {
  /** False for an idempotent no-op: the row already was in the target state. */
  readonly applied: boolean;
  /** The state the row left (or, for a no-op, is in). */
  readonly from: string;
  readonly to: string;
  /** The row's version after the call; `undefined` for an entity without a version column. */
  readonly version: number | undefined;
}

/**
 * Moves one row to state `to`, checking the state machine and the row in ONE statement:
 * `UPDATE ... SET status = :to, version = version + 1 WHERE id = :id AND status = :from AND version = :v`.
 *
 * - `to` equals the current state: idempotent success, nothing written (`applied: false`),
 *   so a redelivered "pay" command does not fail.
 * - a transition the machine does not declare: `IllegalStateTransitionError`.
 * - the row changed in between: it is re-read; if it is now in `to` (a concurrent
 *   duplicate did the work) this is a no-op, if `to` is now illegal that error is thrown,
 *   otherwise `OptimisticLockError` (reload and retry, e.g. with `retryOnOptimisticLock`).
 *
 * @example
 * await applyTransition(manager, Order, orderId, orderLifecycle, 'paid', { changes: { paidAt: Date.now() } });
 */
export async function applyTransition<T extends ObjectLiteral, S extends string>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  id: EntityId,
  machine: StateMachine<S>,
  to: S,
  options: ApplyTransitionOptions<T> = {},
): Promise<TransitionOutcome> {
  const metadata = manager.getRepository(entity).metadata;
  const stateProperty = options.stateProperty ?? 'status';
  const stateColumn = metadata.findColumnWithPropertyPath(stateProperty);
  if (!stateColumn) {
    throw new IdempotencyConfigurationError(
      `${metadata.name} has no '${stateProperty}' column.`,
      "Pass { stateProperty: 'yourStateProperty' }.",
    );
  }
  const versionColumn = versionColumnOf(metadata, false);
  const where = primaryWhere(metadata, id);
  const read = async () => {
    const row = (await findLatestRow(manager, entity, where as never)) as ObjectLiteral | null;
    if (!row) return undefined;
    return {
      state: String(stateColumn.getEntityValue(row)) as S,
      version: versionColumn ? Number(versionColumn.getEntityValue(row)) : undefined,
    };
  };

  let from = options.from as S | undefined;
  let version = options.expectedVersion;
  if (from === undefined || (versionColumn && version === undefined)) {
    const row = await read();
    if (!row) throw new OptimisticLockError(metadata.name, id, version, undefined);
    from ??= row.state;
    version ??= row.version;
  }
  if (machine.decide(from, to) === 'noop') return { applied: false, from, to, version };

  const qb = manager.createQueryBuilder().update(entity);
  const set: Record<string, unknown> = { ...((options.changes ?? {}) as Record<string, unknown>), [stateProperty]: to };
  const condition: Record<string, unknown> = { ...where, [stateProperty]: from };
  if (versionColumn) {
    set[versionColumn.propertyPath] = () => `${qb.escape(versionColumn.databaseName)} + 1`;
    condition[versionColumn.propertyPath] = version;
  }
  const result = await qb
    .set(set as EntityChanges<T>)
    .where(condition)
    .execute();
  if ((result.affected ?? 0) > 0) return { applied: true, from, to, version: version === undefined ? undefined : version + 1 };

  // Nothing matched: find out why.
  const now = await read();
  if (!now) throw new OptimisticLockError(metadata.name, id, version, undefined);
  if (now.state === to) return { applied: false, from: now.state, to, version: now.version };
  machine.assertTransition(now.state, to);
  throw new OptimisticLockError(
    metadata.name,
    id,
    version,
    now.version,
    now.state !== from ? `its ${stateProperty} moved from '${from}' to '${now.state}'` : undefined,
  );
}
