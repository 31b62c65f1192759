export * from './core/index.js';
export * from './stores/memory.store.js';
export * from './nest/index.js';
export * from './tokens/index.js';
export * from './locks/index.js';
// The state machine is plain logic (no TypeORM import), so it is offered from the root too.
export {
  defineStateMachine,
  type StateMachine,
  type StateMachineOptions,
  type StateOf,
  type TransitionTable,
  type TransitionDecision,
} from './typeorm/state-machine.js';
export { IllegalStateTransitionError } from './typeorm/errors.js';
export * from './observability/index.js';
