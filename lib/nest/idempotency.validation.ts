import {
  DEFAULT_LEASE_TTL,
  DEFAULT_TTL,
  IdempotencyConfigurationError,
  isTransactionalStore,
  type IdempotencyStore,
} from '../core/index.js';
import { isCacheErrorsOption } from '../core/cached-errors.js';
import { checkWholeNumber, shown } from '../core/options.js';
import { checkPolicyNumbers, type PolicyNumberRules } from '../core/execution.js';
import type { IdempotentOptions } from './idempotency.options.js';

const STORE_METHODS = ['claim', 'complete', 'release', 'renew', 'get', 'delete'] as const;
const FUNCTION_OPTIONS = ['key', 'scope'] as const;
const BOOLEAN_OPTIONS = ['required', 'transactional', 'ack'] as const;

/** How `@Idempotent()` and `IdempotencyModule.forRoot()` word and bound their numbers. */
const MODULE_NUMBER_RULES: PolicyNumberRules = { waitTimeoutMin: 1, bytesName: 'maxResponseBytes' };

/**
 * The rules every handler's options (already merged over the module's) follow, whatever
 * its transport (each transport adds its own: `Transport.validate`): throws an
 * `IdempotencyConfigurationError` that starts with `where` (`@Idempotent() on
 * Class.method`, `IdempotencyModule.forRoot()`) and says how to fix it. `store` is the
 * store the handler will use (its own, or the module's).
 */
export function validateIdempotentOptions(
  where: string,
  options: IdempotentOptions & { maxDeliveries?: number },
  store: IdempotencyStore,
): void {
  const fail = (problem: string, fix: string): never => {
    throw new IdempotencyConfigurationError(`${where}: ${problem}`, fix);
  };
  // The library's one rule for durations and counts, so these read as they do everywhere else.
  checkPolicyNumbers(where, options, MODULE_NUMBER_RULES);
  checkWholeNumber(where, 'maxDeliveries', options.maxDeliveries);
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
  if (options.cacheErrors !== undefined && !isCacheErrorsOption(options.cacheErrors)) {
    fail(
      `cacheErrors must be a function or a list of error classes, got ${shown(options.cacheErrors)}.`,
      'Pass cacheErrors: (error) => boolean, or cacheErrors: [CardDeclinedError], or leave it out.',
    );
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
  const own = options.store;
  if (own !== undefined) {
    const missing = STORE_METHODS.filter((method) => typeof (own as unknown as Record<string, unknown>)?.[method] !== 'function');
    if (missing.length > 0) {
      fail(
        `store is not an IdempotencyStore (it has no ${missing.join(', ')}).`,
        'Pass a MemoryIdempotencyStore, RedisIdempotencyStore, TypeOrmIdempotencyStore, or an object implementing IdempotencyStore.',
      );
    }
  }
  if (options.transactional === true && !isTransactionalStore(store)) {
    fail(
      'transactional: true needs a store that writes records in your database transaction, and this store has none.',
      'Use a TypeOrmIdempotencyStore from nestjs-idempotency/typeorm as the store of this handler or of IdempotencyModule.forRoot().',
    );
  }
}

/** The options of `IdempotencyModule.forRoot()` that are no handler's: never merged into one. */
interface ModuleOnlyOptions {
  readonly onEvent?: unknown;
  readonly enabled?: unknown;
  readonly logger?: unknown;
  readonly runtime?: unknown;
  readonly exposeConfigurationErrors?: unknown;
}

/**
 * A handler's options over the module's defaults (options the handler leaves undefined
 * keep the module's), less the module's options named in `notInherited` (those of
 * another transport's requests): the handler's own of those names are left out too.
 */
export function mergeHandlerOptions(
  moduleOptions: Readonly<IdempotentOptions & ModuleOnlyOptions>,
  handlerOptions: IdempotentOptions,
  notInherited: readonly string[] = [],
): IdempotentOptions & Record<string, unknown> {
  const {
    onEvent: _onEvent,
    enabled: _enabled,
    logger: _logger,
    runtime: _runtime,
    exposeConfigurationErrors: _exposeConfigurationErrors,
    ...moduleDefaults
  } = moduleOptions;
  const options: Record<string, unknown> = { ...moduleDefaults };
  for (const name of notInherited) delete options[name];
  for (const [name, value] of Object.entries(handlerOptions))
    if (value !== undefined && !notInherited.includes(name)) options[name] = value;
  return options as IdempotentOptions & Record<string, unknown>;
}
