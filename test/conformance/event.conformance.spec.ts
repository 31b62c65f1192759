import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { stepProbe } from './steps.js';
import { Hold, describeTransportConformance, type ConformanceDriver, type ConformanceStore } from './conformance.js';
import {
  IN_PROCESS_INPUT_PAIRS,
  RICH_VALUES,
  answerOf,
  expectLibraryError,
  keyOfAsk,
  refusalOf,
  seen,
  richReplays,
  type Ask,
  type Seen,
} from './in-process.js';

/**
 * `@Idempotent({ key })` on @nestjs/event-emitter listeners, emitted with `emitAsync`
 * (which hands the emitter the listeners' values). `suppressErrors: false` so that the
 * emitting code sees a refusal (by default the emitter logs and drops listener errors).
 * Operations: two listeners of one event whose classes share a name, in two modules.
 */
interface Emitted extends Ask {
  readonly input: unknown;
}

const effects = new Effects();
const hold = new Hold();
const keyOf = (event: Emitted) => keyOfAsk(event);
const LISTEN = { suppressErrors: false };

function receiptModule(area: string, scoped = true) {
  @Injectable()
  class ReceiptListener {
    @OnEvent('conf.paid', LISTEN)
    @Idempotent({ key: keyOf, scope: scoped ? `${area}.receipt` : undefined })
    async onPaid(event: Emitted) {
      return { operation: `${area}.receipt`, principal: event.tenant, run: effects.hit(`${area}.receipt`) };
    }
  }
  @Module({ providers: [ReceiptListener] })
  class FeatureModule {}
  return FeatureModule;
}

@Injectable()
class LedgerListener {
  @OnEvent('conf.credited', LISTEN)
  @Idempotent({ key: keyOf })
  async onCredited(event: Emitted) {
    return { operation: 'credited', principal: event.tenant, run: effects.hit('credited') };
  }

  @OnEvent('conf.held', LISTEN)
  @Idempotent({ key: keyOf, inFlight: 'reject' })
  async onHeld(event: Emitted) {
    const value = { operation: 'held', principal: event.tenant, run: effects.hit('held') };
    await hold.gate;
    return value;
  }

  @OnEvent('conf.steps', LISTEN)
  @Idempotent({ key: keyOf })
  async onSteps(event: Emitted) {
    await stepProbe.run();
    return { operation: 'steps', principal: event.tenant, run: effects.hit('steps') };
  }

  @OnEvent('conf.rich', LISTEN)
  @Idempotent({ key: keyOf })
  async onRich(event: Emitted) {
    return RICH_VALUES[event.input as string](effects.hit('rich'));
  }
}

const EVENTS: Record<string, string> = {
  'billing.receipt': 'conf.paid',
  'shipping.receipt': 'conf.paid',
  credited: 'conf.credited',
  held: 'conf.held',
  rich: 'conf.rich',
  steps: 'conf.steps',
};

async function start(store: ConformanceStore, modules: unknown[]): Promise<INestApplicationContext> {
  @Module({
    imports: [EventEmitterModule.forRoot(), IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), ...(modules as [])],
  })
  class AppModule {}
  const context = await NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
  try {
    await context.init();
  } catch (error) {
    await context.close().catch(() => undefined);
    throw error;
  }
  return context;
}

/** What the listener of `operation` gave the emitter (`emitAsync` answers every listener's value, in order). */
async function emit(context: INestApplicationContext, operation: string, event: Emitted): Promise<unknown> {
  const results = (await context.get(EventEmitter2).emitAsync(EVENTS[operation] ?? operation, event)) as unknown[];
  if (operation === 'rich') return results[0];
  return (
    results.find((result) => (result as { operation?: string })?.operation === operation) ?? {
      operation: `none of ${JSON.stringify(results)}`,
    }
  );
}

let app: INestApplicationContext;

@Module({ providers: [LedgerListener] })
class LedgerModule {}

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'event',
  async boot(store) {
    app = await start(store, [receiptModule('billing'), receiptModule('shipping'), LedgerModule]);
  },
  close: () => app.close(),
  call: ({ operation, key, principal, input }) => seen(() => emit(app, operation, { tenant: principal, ref: key, input })),
  answerOf,
  refusalOf,
  expectRefusalShape: expectLibraryError,
  runs: (operation) => effects.count(operation),
  input: { amount: 10 },
  principals: { operation: 'credited', via: ['the key (the tenant in the key option)'] },
  operations: [
    {
      name: 'two listeners of one event whose classes share a name (ReceiptListener in two modules)',
      a: 'billing.receipt',
      b: 'shipping.receipt',
    },
    { name: 'listeners of two events', a: 'credited', b: 'billing.receipt' },
  ],
  sameClassNames: [
    {
      name: 'two listeners named ReceiptListener.onPaid in two modules',
      async boot(store) {
        const context = await start(store, [receiptModule('one', false), receiptModule('two', false)]);
        return {
          call: (which, key) => seen(() => emit(context, which === 'a' ? 'one.receipt' : 'two.receipt', { ref: key, input: {} })),
          close: () => context.close(),
        };
      },
    },
  ],
  inputs: { operation: 'credited', pairs: IN_PROCESS_INPUT_PAIRS },
  replays: richReplays('rich', (kind) => kind),
  refusals: { operation: 'credited', missingKey: true },
  inFlight: { operation: 'held', hold: hold.hold },
  steps: { operation: 'steps', probe: stepProbe },
};

describeTransportConformance('@Idempotent() on an @OnEvent() listener', driver);
