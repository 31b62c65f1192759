/**
 * `nestjs-idempotency/state-machine`: explicit lifecycle transitions, plain logic with no
 * peer dependency. `applyTransition` (from `nestjs-idempotency/typeorm`) applies one to a
 * row with a version check. The code lives beside it in lib/typeorm/patterns/state-machine.ts
 * (which imports nothing of TypeORM), and /typeorm offers the same list.
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
