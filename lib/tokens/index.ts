export * from './one-time-token.store.js';
export * from './memory-one-time-token.store.js';
export * from './one-time-token.errors.js';
export * from './one-time-token.service.js';
export * from './one-time-token.guard.js';
export * from './one-time-token.module.js';
