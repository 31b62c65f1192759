import { makeIdempotent, type IdempotencyStore, type MakeIdempotentOptions } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { stepProbe } from './steps.js';
import { Hold, describeTransportConformance, type ConformanceDriver } from './conformance.js';
import {
  DeclinedError,
  IN_PROCESS_INPUT_PAIRS,
  CACHED_CLASSES,
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
function billingRefund(operation = 'billing.refund') {
  return async function refund(ask: Ask, _input: unknown) {
    return { operation, principal: ask.tenant, run: effects.hit(operation) };
  };
}
function shippingRefund(operation = 'shipping.refund') {
  return async function refund(ask: Ask, _input: unknown) {
    return { principal: ask.tenant, run: effects.hit(operation), operation };
  };
}
/** One factory, two areas: two functions named `refund` whose code is the same text. */
function refundFor(area: string) {
  return async function refund(ask: Ask, _input: unknown) {
    return { operation: `${area}.refund`, principal: ask.tenant, run: effects.hit(`${area}.refund`) };
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
async function declineByPredicate(_ask: Ask, _input: unknown): Promise<never> {
  throw new DeclinedError(effects.hit('declineByPredicate'));
}
async function rich(_ask: Ask, kind: unknown) {
  return RICH_VALUES[kind as string](effects.hit('rich'));
}

async function steps(ask: Ask, _input: unknown) {
  await stepProbe.run();
  return { operation: 'steps', principal: ask.tenant, run: effects.hit('steps') };
}

let functions: Record<string, (ask: Ask, input: unknown) => Promise<unknown>> = {};

type Fn = (ask: Ask, input: unknown) => Promise<unknown>;

/** `scope` given (the two `refund`s of the application need one each), else the default: the function's name. */
function wrap(store: IdempotencyStore, fn: Fn, options: Partial<MakeIdempotentOptions<[Ask, unknown]>> = {}) {
  return makeIdempotent(fn, {
    store,
    key: (ask: Ask) => keyOfAsk(ask) as string,
    fingerprint: true,
    cacheErrors: CACHED_CLASSES,
    ...options,
  });
}

/** Two functions named `refund`, default scopes, one store: refused when wrapped, or kept apart. */
function sameNames(name: string, a: Fn, b: Fn) {
  return {
    name,
    async boot(store: IdempotencyStore) {
      const wrapped = { a: wrap(store, a), b: wrap(store, b) };
      return {
        call: (which: 'a' | 'b', key: string) => seen(() => wrapped[which]({ ref: key }, {})),
        close: async () => undefined,
      };
    },
  };
}

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'make-idempotent',
  async boot(store) {
    functions = {
      'billing.refund': wrap(store, billingRefund(), { scope: 'billing.refund' }),
      'shipping.refund': wrap(store, shippingRefund(), { scope: 'shipping.refund' }),
      credit: wrap(store, credit),
      rich: wrap(store, rich),
      held: wrap(store, held, { inFlight: 'reject' }),
      steps: wrap(store, steps),
      decline: wrap(store, decline),
      declineByPredicate: wrap(store, declineByPredicate, { cacheErrors: cachesDeclined }),
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
    { name: 'two functions named refund, from two modules, each with its scope', a: 'billing.refund', b: 'shipping.refund' },
    { name: 'two functions', a: 'credit', b: 'billing.refund' },
  ],
  sameClassNames: [
    sameNames('two functions named refund from two modules', billingRefund('one.refund'), shippingRefund('two.refund')),
    sameNames('two functions named refund made by one factory (the same code) for two areas', refundFor('one'), refundFor('two')),
  ],
  inputs: { operation: 'credit', pairs: IN_PROCESS_INPUT_PAIRS },
  replays: [
    ...richReplays('rich', (kind) => kind),
    cachedErrorReplay('decline', {}, DeclinedError, 'its class'),
    cachedErrorReplay('declineByPredicate', {}, RangeError, 'a predicate'),
  ],
  refusals: { operation: 'credit', missingKey: true },
  inFlight: { operation: 'held', hold: hold.hold },
  steps: { operation: 'steps', probe: stepProbe },
};

describeTransportConformance('makeIdempotent(fn)', driver);
