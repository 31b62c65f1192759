import { IdempotencyConfigurationError } from '../core/errors.js';
import type { StateMachine } from '../state-machine/state-machine.js';
// The one error class both entry points throw (it imports nothing of TypeORM).
import { OptimisticLockError } from '../typeorm/patterns/errors.js';

/**
 * A Prisma model delegate (`tx.account`), as far as the helpers use it. Its arguments are
 * `any`: each generated delegate types them for its own model.
 */
export interface PrismaModelLike {
  updateMany(args: { where: any; data: any }): Promise<{ count: number }>;
  findFirst(args: { where: any; select?: any }): Promise<Record<string, unknown> | null>;
}

/** Options of `updateWithVersion`. */
export interface UpdateWithVersionOptions {
  /**
   * The model's version field (an `Int`).
   * @default 'version'
   */
  versionField?: string;
}

/** The model's name for messages (`$name` or `name` on Prisma's delegates), or `'Row'`. */
function modelNameOf(model: object): string {
  const named = model as { $name?: unknown; name?: unknown };
  const name = named.$name ?? named.name;
  return typeof name === 'string' && name !== '' ? name : 'Row';
}

/**
 * Updates one row only if it is still at `expectedVersion`, in ONE conditional statement
 * (Prisma's `updateMany` with the version in `where`, checked on `count`), and moves its
 * version on by one. Returns the new version. Throws `OptimisticLockError` (the TypeORM
 * helper's error) when no row matched: another writer got there first, or the row is gone.
 *
 * @example
 * const account = await tx.account.findUniqueOrThrow({ where: { id } });
 * await updateWithVersion(tx.account, { id }, account.version, { balance: account.balance - 10 });
 */
export async function updateWithVersion<M extends PrismaModelLike>(
  model: M,
  where: Record<string, unknown>,
  expectedVersion: number,
  data: Record<string, unknown>,
  options: UpdateWithVersionOptions = {},
): Promise<number> {
  if (!Number.isInteger(expectedVersion)) {
    throw new IdempotencyConfigurationError(
      `updateWithVersion: expectedVersion must be an integer, got ${expectedVersion}.`,
      'Pass the version field of the row you read.',
    );
  }
  const field = options.versionField ?? 'version';
  const { count } = await model.updateMany({
    where: { ...where, [field]: expectedVersion },
    data: { ...data, [field]: { increment: 1 } },
  });
  if (count > 0) return expectedVersion + 1;
  const row = await model.findFirst({ where, select: { [field]: true } });
  throw new OptimisticLockError(modelNameOf(model), where, expectedVersion, row ? Number(row[field]) : undefined);
}

/** Options of `applyTransition`. */
export interface ApplyTransitionOptions {
  /**
   * Field holding the state.
   * @default 'status'
   */
  stateField?: string;
  /**
   * The version field, checked and moved on by the transition when the row has it; `false`: none.
   * @default 'version' (when the row read has one, or `expectedVersion` is given)
   */
  versionField?: string | false;
  /**
   * The state the caller read; without it the row is read first.
   * @default read from the row
   */
  from?: string;
  /**
   * The version the caller read.
   * @default read from the row together with `from`
   */
  expectedVersion?: number;
  /**
   * Other fields to set in the same update, e.g. `{ paidAt: new Date() }`.
   * @default {}
   */
  data?: Record<string, unknown>;
}

/** What `applyTransition` did: moved the row, or found it already in the target state. */
export interface TransitionOutcome {
  /** False for an idempotent no-op: the row already was in the target state. */
  readonly applied: boolean;
  readonly from: string;
  readonly to: string;
  /** The row's version after the call; `undefined` without a version field. */
  readonly version: number | undefined;
}

/**
 * Moves one row to state `to` in ONE conditional update (`updateMany` with the state, and
 * the version, in `where`), as the TypeORM helper does: `to` equal to the current state is
 * an idempotent no-op; a transition the machine does not declare throws
 * `IllegalStateTransitionError`; a row that moved in between is re-read (a concurrent
 * duplicate that reached `to` makes this a no-op), else `OptimisticLockError`.
 *
 * @example
 * await applyTransition(tx.order, { id: orderId }, orderLifecycle, 'paid', { data: { paidAt: new Date() } });
 */
export async function applyTransition<S extends string>(
  model: PrismaModelLike,
  where: Record<string, unknown>,
  machine: StateMachine<S>,
  to: S,
  options: ApplyTransitionOptions = {},
): Promise<TransitionOutcome> {
  const stateField = options.stateField ?? 'status';
  const versionField = options.versionField === false ? undefined : (options.versionField ?? 'version');
  const name = modelNameOf(model);
  const read = async () => {
    const row = await model.findFirst({ where });
    if (!row) return undefined;
    const version = versionField && row[versionField] !== undefined ? Number(row[versionField]) : undefined;
    return { state: String(row[stateField]) as S, version };
  };
  let from = options.from as S | undefined;
  let version = options.expectedVersion;
  if (from === undefined) {
    const row = await read();
    if (!row) throw new OptimisticLockError(name, where, version, undefined);
    from = row.state;
    version ??= row.version;
  }
  if (machine.decide(from, to) === 'noop') return { applied: false, from, to, version };
  const condition: Record<string, unknown> = { ...where, [stateField]: from };
  const data: Record<string, unknown> = { ...(options.data ?? {}), [stateField]: to };
  if (versionField && version !== undefined) {
    condition[versionField] = version;
    data[versionField] = { increment: 1 };
  }
  const { count } = await model.updateMany({ where: condition, data });
  if (count > 0) return { applied: true, from, to, version: version === undefined ? undefined : version + 1 };
  const now = await read();
  if (!now) throw new OptimisticLockError(name, where, version, undefined);
  if (now.state === to) return { applied: false, from: now.state, to, version: now.version };
  machine.assertTransition(now.state, to);
  throw new OptimisticLockError(
    name,
    where,
    version,
    now.version,
    now.state !== from ? `its ${stateField} moved from '${from}' to '${now.state}'` : undefined,
  );
}
