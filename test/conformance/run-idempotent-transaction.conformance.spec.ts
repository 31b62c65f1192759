import type { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore, runIdempotentTransaction } from '../../lib/typeorm/index.js';
import { Effects } from '../support/effects.js';
import { createPgDataSource } from '../typeorm/support.js';
import { describeTransportConformance, type ConformanceDriver } from './conformance.js';
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
 * `runIdempotentTransaction(dataSource, { key, scope, fingerprint }, work)` on PostgreSQL:
 * its records live in the SQL table (not the conformance store). The operation is the
 * `scope` option, the input the `fingerprint`, and the tenant goes into the key.
 */
const effects = new Effects();
let db: Awaited<ReturnType<typeof createPgDataSource>>;
let dataSource: DataSource;

const driver: ConformanceDriver<unknown, Seen> = {
  entry: 'run-idempotent-transaction',
  async boot() {
    db = await createPgDataSource({ poolSize: 4 });
    dataSource = db.dataSource;
    await new TypeOrmIdempotencyStore(dataSource).ensureTable();
  },
  close: () => db.destroy(),
  call({ operation, key, principal, input }) {
    const clientKey = key === undefined ? '' : principal ? `${principal}:${key}` : key;
    return seen(() =>
      runIdempotentTransaction(dataSource, { key: clientKey, scope: operation, fingerprint: input }, async () => {
        const run = effects.hit(operation);
        return operation === 'rich' ? RICH_VALUES[input as string](run) : { operation, principal, run };
      }),
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
  // The key is a required option: there is no call without one.
  refusals: { operation: 'refund', missingKey: false },
  steps: {
    notApplicable:
      'the transaction commits or rolls back with its record, so there is nothing to resume: step() is refused there (docs/steps.md, "Transactional handlers")',
  },
  inFlight: {
    notApplicable:
      'a concurrent duplicate waits for the first transaction (the record row is locked) and then replays it: there is no in-flight refusal',
  },
};

describeTransportConformance('runIdempotentTransaction() on PostgreSQL', driver);
