export * from './lock-provider.js';
export * from './lock.errors.js';
export * from './memory-lock.provider.js';
export * from './with-lock.js';
