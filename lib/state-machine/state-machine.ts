// Pure logic: no TypeORM import here, so the `/state-machine` entry point
// (lib/state-machine/index.ts) can offer it without the peer dependency, and /typeorm
// re-exports it whole (`export *`): every export of it is public, from both.
import { IdempotencyConfigurationError } from '../core/errors.js';
import { IllegalStateTransitionError } from './state-machine-error.js';

export { IllegalStateTransitionError };

/** For each state, the states it may move to. States that appear only as targets are final. */
export type TransitionTable = { readonly [state: string]: readonly string[] };

/** Every state a transition table mentions, as a key or as a target. */
export type StateOf<T extends TransitionTable> = Extract<keyof T, string> | T[keyof T][number];

/** What a requested transition amounts to. */
export type TransitionDecision =
  /** The entity is already in the target state: an idempotent success, nothing to write. */
  | 'noop'
  /** A declared transition: write it. */
  | 'apply';

/** Options of `defineStateMachine`. */
export interface StateMachineOptions {
  /**
   * Name used in error messages, e.g. `'Order'`.
   * @default undefined (messages name no machine)
   */
  name?: string;
}

/**
 * A declared lifecycle. Moving to the state an entity is already in is always an
 * idempotent success (`'noop'`), so a redelivered "pay" message does not fail; any
 * transition the table does not list throws `IllegalStateTransitionError`.
 */
export interface StateMachine<S extends string = string> {
  readonly name: string | undefined;
  /** Every known state. */
  readonly states: readonly S[];
  /** States `from` may move to (empty for a final state). */
  targetsOf(from: S): readonly S[];
  /** True when `to` is listed for `from`, or equals it. */
  canTransition(from: S, to: S): boolean;
  /** `'noop'` when `from === to`, `'apply'` when declared; throws `IllegalStateTransitionError` otherwise. */
  decide(from: S, to: S): TransitionDecision;
  /** Throws `IllegalStateTransitionError` unless `decide` would succeed. */
  assertTransition(from: S, to: S): void;
  /** True for a state no transition leaves. */
  isFinal(state: S): boolean;
  /** True for a string this machine declares (narrows unknown input, e.g. from a request body). */
  isState(value: unknown): value is S;
}

/**
 * Declares the allowed transitions of a lifecycle.
 *
 * @example
 * const orderLifecycle = defineStateMachine({
 *   pending: ['paid', 'cancelled'],
 *   paid: ['shipped', 'refunding'],
 *   shipped: ['completed'],
 * }, { name: 'Order' });
 * orderLifecycle.decide('paid', 'paid');      // 'noop'
 * orderLifecycle.decide('cancelled', 'shipped'); // throws IllegalStateTransitionError
 */
export function defineStateMachine<const T extends TransitionTable>(table: T, options: StateMachineOptions = {}): StateMachine<StateOf<T>> {
  type S = StateOf<T>;
  const targets = new Map<string, readonly string[]>();
  const states = new Set<string>();
  for (const [from, to] of Object.entries(table)) {
    if (!Array.isArray(to)) {
      throw new IdempotencyConfigurationError(
        `defineStateMachine: the targets of '${from}' must be an array of states.`,
        `Write ${JSON.stringify(from)}: ['next', 'other'] (an empty array, or leaving the state out, makes it final).`,
      );
    }
    states.add(from);
    for (const state of to) {
      if (typeof state !== 'string' || state === '') {
        throw new IdempotencyConfigurationError(
          `defineStateMachine: '${from}' lists a target that is not a non-empty string.`,
          'Name every state with a non-empty string.',
        );
      }
      states.add(state);
    }
    targets.set(from, Object.freeze([...new Set(to)]));
  }
  const none: readonly string[] = Object.freeze([]);
  const name = options.name;

  const machine: StateMachine<S> = {
    name,
    states: Object.freeze([...states]) as readonly S[],
    targetsOf: (from) => (targets.get(from) ?? none) as readonly S[],
    canTransition: (from, to) => states.has(to) && (from === to || (targets.get(from)?.includes(to) ?? false)),
    decide(from, to) {
      if (!states.has(to)) {
        throw new IllegalStateTransitionError(from, to, targets.get(from) ?? none, name);
      }
      if (from === to) return 'noop';
      if (targets.get(from)?.includes(to)) return 'apply';
      throw new IllegalStateTransitionError(from, to, targets.get(from) ?? none, name);
    },
    assertTransition(from, to) {
      machine.decide(from, to);
    },
    isFinal: (state) => (targets.get(state)?.length ?? 0) === 0,
    isState: (value): value is S => typeof value === 'string' && states.has(value),
  };
  return Object.freeze(machine);
}
