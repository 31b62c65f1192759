/**
 * `nestjs-idempotency/state-machine`: explicit lifecycle transitions, plain logic with no
 * peer dependency. `applyTransition` (from `nestjs-idempotency/typeorm`) applies one to a
 * row with a version check, and /typeorm offers the same list. The code lives here
 * (state-machine.ts imports nothing of TypeORM); lib/typeorm's patterns use it.
 */
export {
  defineStateMachine,
  IllegalStateTransitionError,
  type StateMachine,
  type StateMachineOptions,
  type StateOf,
  type TransitionDecision,
  type TransitionTable,
} from './state-machine.js';
