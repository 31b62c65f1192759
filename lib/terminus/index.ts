export * from './idempotency.health.js';
export * from './outbox.health.js';
