/**
 * `nestjs-idempotency/state-machine`: explicit lifecycle transitions, plain logic with no
 * peer dependency. `applyTransition` (from `nestjs-idempotency/typeorm`) applies one to a
 * row with a version check.
 */
export {
  defineStateMachine,
  IllegalStateTransitionError,
  type StateMachine,
  type StateMachineOptions,
  type StateOf,
  type TransitionDecision,
  type TransitionTable,
} from '../typeorm/patterns/state-machine.js';
