import { IdempotencyConfigurationError, IdempotencyKeyMissingError } from './errors.js';
import type { CacheErrors } from './cached-errors.js';
import type { IdempotencyEventListener } from './events.js';
import { IdempotencyEngine, type InFlightStrategy, type StoreErrorStrategy } from './engine.js';
import { fingerprintOf, storageKeyOf, withoutTrailingUndefined } from './hash.js';
import { normalizeIdempotencyKey } from './key.js';
import { checkPolicyNumbers, ENGINE_NUMBER_RULES } from './execution.js';
import { sizeLimitOf } from './max-response-bytes.js';
import { resolvePolicy } from './policy.js';
import type { IdempotencyStore } from './store.js';

/** Options of `makeIdempotent`: the store, how to derive the key, and the execution policy. */
export interface MakeIdempotentOptions<A extends unknown[]> {
  /** Where records live. Share one store between processes that must not repeat work. */
  store: IdempotencyStore;
  /** Derives the idempotency key from the call's arguments (e.g. an event id). */
  key: (...args: A) => string | number;
  /**
   * Namespace of the keys, so two wrapped functions with equal keys stay independent.
   * @default the function's name (an anonymous function must be given one)
   */
  scope?: string;
  /** Retention of a completed result, ms. @default 86400000 (24 h) */
  ttl?: number;
  /** Lease of a running call, ms; renewed every third while the function runs. @default 30000 */
  leaseTtl?: number;
  /**
   * Same key while the first call runs: `'wait'` for its result, or `'reject'` with
   * `IdempotencyInFlightError`.
   * @default 'wait'
   */
  inFlight?: InFlightStrategy;
  /** Longest wait for a running duplicate, ms. @default 10000 */
  waitTimeout?: number;
  /**
   * Material that must match for a key to be reused (a mismatch throws
   * `IdempotencyFingerprintMismatchError`); `true` uses all arguments (trailing
   * `undefined` ones count as absent: `f(x, undefined)` is the call `f(x)`).
   * @default false
   */
  fingerprint?: boolean | ((...args: A) => unknown);
  /**
   * Errors stored and rethrown to duplicates: a predicate, or the error classes whose
   * instances are (a listed class comes back as itself; a predicate's as the nearest
   * built-in class of its chain, with the stored name, message and fields). @default none
   */
  cacheErrors?: CacheErrors;
  /** @default 'fail-closed' */
  onStoreError?: StoreErrorStrategy;
  /**
   * Largest serialized result stored, bytes: a larger one is not stored (duplicates get
   * `IdempotencyNotReplayableError`). The same option as the module's.
   * @default 1048576
   */
  maxResponseBytes?: number;
  /**
   * @deprecated use maxResponseBytes (the same limit under the module's name; this alias
   * goes in 1.0). Both given with different values is refused.
   * @default 1048576
   */
  maxResultBytes?: number;
  onEvent?: IdempotencyEventListener;
  /** @internal Shares in-process wake-ups with other wrappers; one is created when omitted. */
  engine?: IdempotencyEngine;
}

/** The function `makeIdempotent` returns: the wrapped function, run once per key. */
export type IdempotentFunction<A extends unknown[], R> = (...args: A) => Promise<Awaited<R>>;

/**
 * Wraps an async function so that calls with the same key run it once: concurrent
 * duplicates wait for (or are refused) the running call, later ones get a faithful copy
 * of its stored result (Date, Map, Set, bigint, Buffer come back as themselves; see
 * docs/concepts.md), and a thrown error releases the key so a retry runs it again.
 *
 * @example
 * const chargeOnce = makeIdempotent(charge, { store, key: (order) => order.id });
 */
export function makeIdempotent<A extends unknown[], R>(fn: (...args: A) => R, options: MakeIdempotentOptions<A>): IdempotentFunction<A, R> {
  if (!options?.store) {
    throw new IdempotencyConfigurationError(
      'makeIdempotent needs a store.',
      'Pass { store: new MemoryIdempotencyStore() } or a shared Redis/TypeORM store.',
    );
  }
  if (typeof options.key !== 'function') {
    throw new IdempotencyConfigurationError(
      'makeIdempotent needs a key function.',
      'Pass { key: (...args) => args[0].id } returning a string unique per operation.',
    );
  }
  const scope = options.scope ?? fn.name;
  if (!scope) {
    throw new IdempotencyConfigurationError(
      'makeIdempotent cannot name an anonymous function.',
      'Pass { scope: "charge-order" } so its keys do not collide with other wrapped functions.',
    );
  }
  if (options.scope === undefined) claimDefaultScope(options.store, scope, fn);
  const owner = `makeIdempotent(${scope})`;
  // A message names the option the user wrote, the deprecated alias included.
  const size = sizeLimitOf(owner, options);
  const own = { ...options, maxResponseBytes: size.value as number | undefined };
  checkPolicyNumbers(owner, own, { ...ENGINE_NUMBER_RULES, bytesName: size.name });
  const engine = options.engine ?? new IdempotencyEngine();
  const policy = resolvePolicy(scope, own, { store: options.store, onEvent: options.onEvent });
  const fingerprint = options.fingerprint;
  const scopeTag = 'fn:' + scope;

  const wrapped = async (...args: A): Promise<Awaited<R>> => {
    const raw = options.key(...args);
    if (raw === undefined || raw === null || raw === '') throw new IdempotencyKeyMissingError(`the key function of ${scope}`);
    const key = storageKeyOf(scopeTag, normalizeIdempotencyKey(raw));
    const material =
      fingerprint === true ? withoutTrailingUndefined(args) : typeof fingerprint === 'function' ? fingerprint(...args) : undefined;
    const request = { key, fingerprint: fingerprint ? fingerprintOf(material) : undefined };
    const { value } = await engine.execute(request, policy, () => fn(...args));
    return value as Awaited<R>;
  };
  Object.defineProperty(wrapped, 'name', { value: `idempotent(${scope})` });
  return wrapped;
}

/**
 * The default scopes (a function's name) taken on each store, with the function that took
 * each: two functions of one name (two modules' `refund`, or one factory's closures for
 * two areas) would share every key, the second answering with the first one's results
 * without running. Nothing but the function object tells them apart (closures of the
 * same code may do different work), so a second function object under a name already
 * taken is refused: wrap each function once, or give it a scope of its own.
 */
const defaultScopes = new WeakMap<IdempotencyStore, Map<string, Function>>();

function claimDefaultScope(store: IdempotencyStore, scope: string, fn: Function): void {
  let byScope = defaultScopes.get(store);
  if (!byScope) defaultScopes.set(store, (byScope = new Map()));
  const taken = byScope.get(scope);
  if (taken === undefined) byScope.set(scope, fn);
  else if (taken !== fn) {
    throw new IdempotencyConfigurationError(
      `makeIdempotent(${scope}): another function named ${scope} already uses the default scope 'fn:${scope}' on this store, so a key used by one would return the other's stored result without running it.`,
      `Give each its own scope (makeIdempotent(${scope}, { scope: 'billing.${scope}', ... })), and wrap a function once, where it is defined, rather than on every call.`,
    );
  }
}
