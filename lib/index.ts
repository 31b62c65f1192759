export * from './core/index.js';
export * from './stores/memory.store.js';
export * from './nest/index.js';
export * from './tokens/index.js';
export * from './locks/index.js';
