import {
  DEFAULT_LEASE_TTL,
  DEFAULT_TTL,
  IdempotencyConfigurationError,
  isTransactionalStore,
  type IdempotencyStore,
} from '../core/index.js';
import { checkWholeNumber, shown } from '../core/options.js';
import type { GraphqlResolverKind } from './graphql-resolver.js';
import type { IdempotencyModuleOptions, IdempotentOptions } from './idempotency.options.js';

/** Where a handler is served from, as far as boot can tell (GraphQL resolvers by kind: only mutations are served). */
export type HandlerTransport = 'http' | 'message' | GraphqlResolverKind | 'unknown';

/** Why `@Idempotent()` refuses each GraphQL resolver kind other than a mutation, and what to do instead. */
const GRAPHQL_REFUSALS: Record<Exclude<GraphqlResolverKind, 'graphql-mutation'>, readonly [string, string]> = {
  'graphql-query': [
    'it is a GraphQL query (@Query()), and @Idempotent() protects GraphQL mutations only: a query changes nothing, so running it twice is harmless and needs no key.',
    'Remove @Idempotent() from this query, and put it on the @Mutation() that makes the change.',
  ],
  'graphql-subscription': [
    'it is a GraphQL subscription (@Subscription()), which delivers events and has no single result to store or replay.',
    'Remove @Idempotent() from this subscription; protect the @Mutation() (or the provider method) that publishes the events instead.',
  ],
  'graphql-field': [
    'it is a GraphQL field resolver (@ResolveField() or @ResolveReference()), which runs once per parent object of every query and mutation that selects the field.',
    'Remove @Idempotent() from this field resolver, and put it on the @Mutation() resolver that performs the change.',
  ],
};

const DURATIONS = ['ttl', 'leaseTtl', 'waitTimeout'] as const;
const COUNTS = ['maxResponseBytes', 'maxDeliveries'] as const;
const STORE_METHODS = ['claim', 'complete', 'release', 'renew', 'get', 'delete'] as const;
const FUNCTION_OPTIONS = ['key', 'scope', 'cacheErrors'] as const;
const BOOLEAN_OPTIONS = ['required', 'transactional', 'ack'] as const;
const DURATION_EXAMPLES = { ttl: '24 * 60 * 60 * 1000', leaseTtl: '30_000', waitTimeout: '10_000' } as const;

/**
 * Checks one handler's options (already merged over the module's) and throws an
 * `IdempotencyConfigurationError` that starts with `where` (`@Idempotent() on
 * Class.method`, `IdempotencyModule.forRoot()`) and says how to fix it. Runs at boot for every
 * `@Idempotent()` handler, and again (cached) when a handler is first served.
 */
export function validateIdempotentOptions(
  where: string,
  options: IdempotentOptions & { maxDeliveries?: number },
  context: {
    /** The store the handler will use (its own, or the module's). */
    readonly store: IdempotencyStore;
    readonly transport: HandlerTransport;
    /** For message handlers bound to one transport (`@MessagePattern(p, Transport.NATS)`): its name. */
    readonly messageTransport?: string;
    /** The options given on the handler itself, before the module's defaults. */
    readonly own: IdempotentOptions;
  },
): void {
  const fail = (problem: string, fix: string): never => {
    throw new IdempotencyConfigurationError(`${where}: ${problem}`, fix);
  };
  if (context.transport.startsWith('graphql-') && context.transport !== 'graphql-mutation') {
    fail(...GRAPHQL_REFUSALS[context.transport as keyof typeof GRAPHQL_REFUSALS]);
  }
  // The library's one rule for durations and counts, so these read as they do everywhere else.
  for (const name of DURATIONS) checkWholeNumber(where, name, options[name], { unit: 'ms', example: DURATION_EXAMPLES[name] });
  for (const name of COUNTS) checkWholeNumber(where, name, options[name]);
  for (const name of BOOLEAN_OPTIONS) {
    const value = options[name];
    if (value !== undefined && typeof value !== 'boolean')
      fail(`${name} must be true or false, got ${shown(value)}.`, `Write ${name}: true or ${name}: false.`);
  }
  const ttl = options.ttl ?? DEFAULT_TTL;
  const leaseTtl = options.leaseTtl ?? DEFAULT_LEASE_TTL;
  if (leaseTtl > ttl) {
    fail(
      `leaseTtl (${leaseTtl} ms) is longer than ttl (${ttl} ms): a stored result would be forgotten before a crashed run's lease even ends.`,
      'Keep leaseTtl (how long a running execution owns its key, e.g. 30000) well below ttl (how long its result is replayed, e.g. 86400000).',
    );
  }
  if (options.inFlight !== undefined && options.inFlight !== 'reject' && options.inFlight !== 'wait') {
    fail(
      `inFlight must be 'reject' or 'wait', got ${JSON.stringify(options.inFlight)}.`,
      "Use inFlight: 'reject' (409 + Retry-After) or 'wait'.",
    );
  }
  if (options.onStoreError !== undefined && options.onStoreError !== 'fail-closed' && options.onStoreError !== 'fail-open') {
    fail(
      `onStoreError must be 'fail-closed' or 'fail-open', got ${JSON.stringify(options.onStoreError)}.`,
      "Use onStoreError: 'fail-closed' (503, the default) or 'fail-open'.",
    );
  }
  for (const name of FUNCTION_OPTIONS) {
    const value = options[name];
    if (value !== undefined && typeof value !== 'function')
      fail(`${name} must be a function, got ${typeof value}.`, `Pass ${name}: (context) => ... or leave it out.`);
  }
  if (options.fingerprint !== undefined && options.fingerprint !== false && typeof options.fingerprint !== 'function') {
    fail('fingerprint must be false or a function.', 'Pass fingerprint: (context) => material, or false to turn the check off.');
  }
  if (options.header !== undefined && (typeof options.header !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(options.header))) {
    fail(`header must be an HTTP header name, got ${JSON.stringify(options.header)}.`, "Use a header name such as 'Idempotency-Key'.");
  }
  if (
    options.replayHeaders !== undefined &&
    (!Array.isArray(options.replayHeaders) || options.replayHeaders.some((h) => typeof h !== 'string'))
  ) {
    fail('replayHeaders must be an array of header names.', "Pass replayHeaders: ['x-request-id'].");
  }
  const store = options.store;
  if (store !== undefined) {
    const missing = STORE_METHODS.filter((method) => typeof (store as unknown as Record<string, unknown>)?.[method] !== 'function');
    if (missing.length > 0) {
      fail(
        `store is not an IdempotencyStore (it has no ${missing.join(', ')}).`,
        'Pass a MemoryIdempotencyStore, RedisIdempotencyStore, TypeOrmIdempotencyStore, or an object implementing IdempotencyStore.',
      );
    }
  }
  if (options.transactional === true && !isTransactionalStore(context.store)) {
    fail(
      'transactional: true needs a store that writes records in your database transaction, and this store has none.',
      'Use a TypeOrmIdempotencyStore from nestjs-idempotency/typeorm as the store of this handler or of IdempotencyModule.forRoot().',
    );
  }
  // Judged on the handler's own options: a module-wide `ack: true` in a hybrid app is meant for its consumers.
  if (context.own.ack === true && context.transport === 'http') {
    fail(
      'ack: true acknowledges broker messages, and this is an HTTP route.',
      'Remove ack from this route; set it on RabbitMQ @MessagePattern / @EventPattern handlers only.',
    );
  }
  if (context.own.ack === true && context.transport === 'graphql-mutation') {
    fail(
      'ack: true acknowledges broker messages, and this is a GraphQL mutation.',
      'Remove ack from this mutation; set it on RabbitMQ @MessagePattern / @EventPattern handlers only.',
    );
  }
  if (context.own.ack === true && context.messageTransport !== undefined && context.messageTransport !== 'RMQ') {
    fail(
      `ack: true needs a transport with manual acknowledgement, and this handler is bound to ${context.messageTransport}, which has none here.`,
      'Remove ack from this handler; ack: true is for RabbitMQ consumers with noAck: false.',
    );
  }
}

/** A handler's options over the module's defaults (options the handler leaves undefined keep the module's). */
export function mergeHandlerOptions(
  moduleOptions: Readonly<IdempotencyModuleOptions>,
  handlerOptions: IdempotentOptions,
): IdempotentOptions & Record<string, unknown> {
  const { onEvent: _onEvent, enabled: _enabled, logger: _logger, runtime: _runtime, ...moduleDefaults } = moduleOptions;
  const options: Record<string, unknown> = { ...moduleDefaults };
  for (const [name, value] of Object.entries(handlerOptions)) if (value !== undefined) options[name] = value;
  return options as IdempotentOptions & Record<string, unknown>;
}
