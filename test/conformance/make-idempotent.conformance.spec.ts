import { makeIdempotent, type IdempotencyStore } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { Hold, describeTransportConformance, type ConformanceDriver } from './conformance.js';
import {
  DeclinedError,
  IN_PROCESS_INPUT_PAIRS,
  cachedErrorReplay,
  cachesDeclined,
  RICH_VALUES,
  answerOf,
  expectLibraryError,
  keyOfAsk,
  refusalOf,
  richReplays,
  seen,
  type Ask,
  type Seen,
} from './in-process.js';

/**
 * `makeIdempotent(fn)`. Its fingerprint is off by default (documented: `@default false`),
 * so the wrapped functions here opt in with `fingerprint: true`, the documented way to
 * have a reused key with other arguments refused.
 */
const effects = new Effects();
const hold = new Hold();

/** Two modules of an application that each wrap a function named `refund` (the default scope is the function's name). */
function billingRefund() {
  return async function refund(ask: Ask, _input: unknown) {
    return { operation: 'billing.refund', principal: ask.tenant, run: effects.hit('billing.refund') };
  };
}
function shippingRefund() {
  return async function refund(ask: Ask, _input: unknown) {
    return { operation: 'shipping.refund', principal: ask.tenant, run: effects.hit('shipping.refund') };
  };
}
async function credit(ask: Ask, _input: unknown) {
  return { operation: 'credit', principal: ask.tenant, run: effects.hit('credit') };
}
async function held(ask: Ask, _input: unknown) {
  const value = { operation: 'held', principal: ask.tenant, run: effects.hit('held') };
  await hold.gate;
  return value;
}
async function decline(_ask: Ask, _input: unknown): Promise<never> {
  throw new DeclinedError(effects.hit('decline'));
}
async function rich(_ask: Ask, kind: unknown) {
  return RICH_VALUES[kind as string](effects.hit('rich'));
}

let functions: Record<string, (ask: Ask, input: unknown) => Promise<unknown>> = {};

function wrap(store: IdempotencyStore, fn: (ask: Ask, input: unknown) => Promise<unknown>, inFlight: 'wait' | 'reject' = 'wait') {
  return makeIdempotent(fn, {
    store,
    key: (ask: Ask) => keyOfAsk(ask) as string,
    fingerprint: true,
    inFlight,
    cacheErrors: cachesDeclined,
  });
}

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'make-idempotent',
  async boot(store) {
    functions = {
      'billing.refund': wrap(store, billingRefund()),
      'shipping.refund': wrap(store, shippingRefund()),
      credit: wrap(store, credit),
      rich: wrap(store, rich),
      held: wrap(store, held, 'reject'),
      decline: wrap(store, decline),
    };
  },
  async close() {},
  call: ({ operation, key, principal, input }) => seen(() => functions[operation]({ tenant: principal, ref: key }, input)),
  answerOf,
  refusalOf,
  expectRefusalShape: expectLibraryError,
  runs: (operation) => effects.count(operation),
  input: { amount: 10 },
  principals: { operation: 'credit', via: ['the key (the tenant in the key function)'] },
  operations: [
    { name: 'two functions (refund, refund) that share a name, from two modules, one store', a: 'billing.refund', b: 'shipping.refund' },
    { name: 'two functions', a: 'credit', b: 'billing.refund' },
  ],
  inputs: { operation: 'credit', pairs: IN_PROCESS_INPUT_PAIRS },
  replays: [...richReplays('rich', (kind) => kind), cachedErrorReplay('decline', {})],
  refusals: { operation: 'credit', missingKey: true },
  inFlight: { operation: 'held', hold: hold.hold },
};

describeTransportConformance('makeIdempotent(fn)', driver);
