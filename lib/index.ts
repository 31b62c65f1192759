export * from './core/index.js';
export * from './stores/memory.store.js';
export * from './nest/index.js';
export * from './tokens/index.js';
export * from './locks/index.js';
// The state machine is plain logic (no TypeORM import), so it is offered from the root too.
export * from './typeorm/patterns/state-machine.js';
export * from './observability/index.js';
