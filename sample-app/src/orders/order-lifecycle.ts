import { defineStateMachine } from '../../../lib/typeorm/index.js';

/**
 * Every state an order may move to. Moving to the state it is already in is an
 * idempotent success (a redelivered "pay" does nothing); anything else not listed
 * here is refused with 409 IDEMPOTENCY_ILLEGAL_TRANSITION. The graph has no cycle, so
 * "order 42 became X" happens at most once and makes a natural idempotency key.
 */
export const orderLifecycle = defineStateMachine(
  {
    pending: ['paid', 'cancelled'],
    paid: ['shipped', 'refunded'],
    shipped: ['delivered'],
  },
  { name: 'Order' },
);
