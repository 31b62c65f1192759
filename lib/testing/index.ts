export * from './store-contract.js';
export * from './idempotency-testing.module.js';
