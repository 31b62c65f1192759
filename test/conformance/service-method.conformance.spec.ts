import { Injectable, Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
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

/** `@Idempotent({ key })` on provider methods: two feature modules each declare a class named RefundService. */
const effects = new Effects();
const hold = new Hold();

/**
 * `scoped`: each method names its own scope, as a fix for same-named classes may require;
 * without it, the defaults (the sameClassNames check: refused at boot, or kept apart).
 */
function refundModule(area: string, scoped = true) {
  const scope = (method: string) => (scoped ? `${area}.${method}` : undefined);
  @Injectable()
  class RefundService {
    @Idempotent({ key: keyOfAsk, scope: scope('refund') })
    async refund(ask: Ask, _input: unknown) {
      return { operation: `${area}.refund`, principal: ask.tenant, run: effects.hit(`${area}.refund`) };
    }

    @Idempotent({ key: keyOfAsk, scope: scope('credit') })
    async credit(ask: Ask, _input: unknown) {
      return { operation: `${area}.credit`, principal: ask.tenant, run: effects.hit(`${area}.credit`) };
    }

    @Idempotent({ key: keyOfAsk, scope: scope('held'), inFlight: 'reject' })
    async held(ask: Ask, _input: unknown) {
      const value = { operation: `${area}.held`, principal: ask.tenant, run: effects.hit(`${area}.held`) };
      await hold.gate;
      return value;
    }

    @Idempotent({ key: keyOfAsk, scope: scope('decline'), cacheErrors: CACHED_CLASSES })
    async decline(_ask: Ask, _input: unknown): Promise<never> {
      throw new DeclinedError(effects.hit(`${area}.decline`));
    }

    @Idempotent({ key: keyOfAsk, scope: scope('declineByPredicate'), cacheErrors: cachesDeclined })
    async declineByPredicate(_ask: Ask, _input: unknown): Promise<never> {
      throw new DeclinedError(effects.hit(`${area}.declineByPredicate`));
    }

    @Idempotent({ key: keyOfAsk, scope: scope('steps') })
    async steps(ask: Ask, _input: unknown) {
      await stepProbe.run();
      return { operation: `${area}.steps`, principal: ask.tenant, run: effects.hit(`${area}.steps`) };
    }

    @Idempotent({ key: keyOfAsk, scope: scope('rich') })
    async rich(_ask: Ask, kind: string) {
      return RICH_VALUES[kind](effects.hit(`${area}.rich`));
    }
  }
  @Module({ providers: [RefundService], exports: [RefundService] })
  class FeatureModule {}
  return { RefundService, FeatureModule };
}

const billing = refundModule('billing');
const shipping = refundModule('shipping');
let app: INestApplicationContext;

const services: Record<string, Type<unknown>> = { billing: billing.RefundService, shipping: shipping.RefundService };

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'service-method',
  async boot(store) {
    @Module({
      imports: [IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), billing.FeatureModule, shipping.FeatureModule],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
  },
  close: () => app.close(),
  call({ operation, key, principal, input }) {
    const [area, method] = operation.split('.');
    const service = app.get(services[area]) as Record<string, (ask: Ask, input: unknown) => Promise<unknown>>;
    return seen(() => service[method]({ tenant: principal, ref: key }, input));
  },
  answerOf,
  refusalOf,
  expectRefusalShape: expectLibraryError,
  runs: (operation) => effects.count(operation),
  input: { amount: 10 },
  principals: { operation: 'billing.refund', via: ['the key (the tenant in the key option)'] },
  operations: [
    { name: 'two providers whose classes share a name (RefundService in two modules)', a: 'billing.refund', b: 'shipping.refund' },
    { name: 'two methods of one provider', a: 'billing.refund', b: 'billing.credit' },
  ],
  sameClassNames: [
    {
      name: 'two providers named RefundService in two modules',
      async boot(store) {
        const one = refundModule('one', false);
        const two = refundModule('two', false);
        @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), one.FeatureModule, two.FeatureModule] })
        class AmbiguousModule {}
        const ambiguous = await NestFactory.createApplicationContext(AmbiguousModule, { logger: false, abortOnError: false });
        try {
          await ambiguous.init();
        } catch (error) {
          await ambiguous.close().catch(() => undefined);
          throw error;
        }
        return {
          call: (which, key) => seen(() => ambiguous.get(which === 'a' ? one.RefundService : two.RefundService).refund({ ref: key }, {})),
          close: () => ambiguous.close(),
        };
      },
    },
  ],
  inputs: { operation: 'billing.refund', pairs: IN_PROCESS_INPUT_PAIRS },
  replays: [
    ...richReplays('billing.rich', (kind) => kind),
    cachedErrorReplay('billing.decline', {}, DeclinedError, 'its class'),
    cachedErrorReplay('billing.declineByPredicate', {}, RangeError, 'a predicate'),
  ],
  refusals: { operation: 'billing.refund', missingKey: true },
  inFlight: { operation: 'billing.held', hold: hold.hold },
  steps: { operation: 'billing.steps', probe: stepProbe },
};

describeTransportConformance('@Idempotent() on a provider method', driver);
