import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IdempotencyModule, IdempotencyService } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { stepProbe } from './steps.js';
import { Hold, describeTransportConformance, type ConformanceDriver } from './conformance.js';
import {
  IN_PROCESS_INPUT_PAIRS,
  RICH_VALUES,
  answerOf,
  expectLibraryError,
  refusalOf,
  richReplays,
  seen,
  type Seen,
} from './in-process.js';

/**
 * `IdempotencyService.run(key, fn, { scope, fingerprint })`: the operation is the
 * `scope` option, the fingerprint the `fingerprint` option (the input here), and the
 * tenant goes into the key as for every in-process entry point.
 */
const effects = new Effects();
const hold = new Hold();
let app: INestApplicationContext;

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'service-run',
  async boot(store) {
    @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false })] })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
  },
  close: () => app.close(),
  call({ operation, key, principal, input }) {
    const service = app.get(IdempotencyService);
    const clientKey = key === undefined ? '' : principal ? `${principal}:${key}` : key;
    return seen(() =>
      service.run(
        clientKey,
        async () => {
          const run = effects.hit(operation);
          if (operation === 'held') await hold.gate;
          if (operation === 'steps') await stepProbe.run();
          return operation === 'rich' ? RICH_VALUES[input as string](run) : { operation, principal, run };
        },
        { scope: operation, fingerprint: input, inFlight: operation === 'held' ? 'reject' : undefined },
      ),
    );
  },
  answerOf,
  refusalOf,
  expectRefusalShape: expectLibraryError,
  runs: (operation) => effects.count(operation),
  input: { amount: 10 },
  principals: { operation: 'refund', via: ['the key (the tenant in the key)'] },
  operations: [{ name: 'two scopes', a: 'refund', b: 'credit' }],
  inputs: { operation: 'refund', pairs: IN_PROCESS_INPUT_PAIRS },
  replays: richReplays('rich', (kind) => kind),
  // The key is a required argument of run(): there is no call without one (an empty key is invalid).
  refusals: { operation: 'refund', missingKey: false },
  inFlight: { operation: 'held', hold: hold.hold },
  steps: { operation: 'steps', probe: stepProbe },
};

describeTransportConformance('IdempotencyService.run()', driver);
