export * from './idempotency.health.js';
