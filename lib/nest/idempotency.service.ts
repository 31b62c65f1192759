import { Inject, Injectable, Logger, Optional, type OnModuleDestroy } from '@nestjs/common';
import { resolvePolicy, type PolicyDefaults, type PolicyOptions } from '../core/policy.js';
import type { CacheErrors } from '../core/cached-errors.js';
import {
  IdempotencyEngine,
  decodeValue,
  deserializeOutcome,
  fingerprintOf,
  normalizeIdempotencyKey,
  storageKeyOf,
  type ExecutionPolicy,
  type IdempotencyError,
  type IdempotencyEventListener,
  type CompletedRecord,
  type IdempotencyRecord,
  type IdempotencyStore,
  type InProgressRecord,
  type InFlightStrategy,
} from '../core/index.js';
import { combineListeners } from '../observability/combine-listeners.js';
import { MemoryIdempotencyStore } from '../core/memory.store.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.constants.js';
import { IdempotencyLog } from './idempotency.logger.js';
import { scopeOf } from './operation.js';
import { principalOf, type IdempotencyPrincipal } from './principal.js';
import type { IdempotencyModuleOptions } from './idempotency.module-options.js';

/** Options of `IdempotencyService.run`, over the module's defaults. */
export interface RunOptions {
  /**
   * Namespace of the key, so unrelated operations with equal keys stay independent.
   * @default 'service'
   */
  scope?: string;
  /** @default the module's ttl */
  ttl?: number;
  /** @default the module's leaseTtl */
  leaseTtl?: number;
  /** @default 'wait' */
  inFlight?: InFlightStrategy;
  /** @default the module's waitTimeout */
  waitTimeout?: number;
  /** Material that must match when the key is reused (hashed); omit to skip the check. */
  fingerprint?: unknown;
  /** @default the module's cacheErrors */
  cacheErrors?: CacheErrors;
}

/** A stored result as `IdempotencyService.decodeResult` reads it (support tooling). */
export type StoredResponse =
  /** The handler's value (the HTTP body), with the status and allow-listed headers replayed with it. */
  | {
      readonly kind: 'value';
      readonly value: unknown;
      readonly status?: number;
      readonly headers?: Readonly<Record<string, string | string[]>>;
    }
  /** An error stored because `cacheErrors` selected it; `body` is what HTTP clients receive. */
  | { readonly kind: 'error'; readonly name: string; readonly message: string; readonly body?: unknown; readonly status?: number }
  /** The handler ran, but its result could not be stored; duplicates get 409 IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE. */
  | { readonly kind: 'unstorable'; readonly reason: string };

/** A completed record as `IdempotencyService.inspect` returns it: the stored record and its answer, decoded. */
export interface InspectedCompletedRecord extends CompletedRecord {
  /** What duplicates are answered with, decoded (what `decodeResult(record)` returns). */
  readonly response: StoredResponse;
}

/** What `IdempotencyService.inspect` returns: a running lease, or a completed record with its decoded `response`. */
export type InspectedRecord = InProgressRecord | InspectedCompletedRecord;

/** Where a client key was used, for support tooling. */
export interface RecordLocator {
  /**
   * The operation the key was sent to, as it scopes keys: `'POST /v1/refunds/:id'` (HTTP
   * method and full route template, with global prefix and URI version), `'rmq refund.create'`
   * (transport and pattern), or `'run:<scope>'` for `run()` keys. See docs/concepts.md.
   * @default 'run:service'
   */
  operation?: string;
  /** @deprecated The same as `operation` (0.1 scoped keys by `Controller.method`; see CHANGELOG.md). */
  handler?: string;
  /**
   * The principal part of the scope, when there was one, as the request's scope read it: a
   * string or number as your `scope` option returned it, or the `IdempotencyPrincipal` of
   * the default (`IdempotencyPrincipal.of('user.id', 7)` for `request.user.id === 7`;
   * see docs/security.md for the sources).
   */
  principal?: string | number | IdempotencyPrincipal;
}

export { scopeOf } from './operation.js';

/**
 * Idempotency inside services, and the shared runtime behind `@Idempotent()`:
 * one store and one engine per application.
 */
@Injectable()
export class IdempotencyService implements OnModuleDestroy {
  readonly store: IdempotencyStore;
  readonly options: Readonly<IdempotencyModuleOptions>;
  /** @internal shared with the interceptor for in-process wake-ups */
  readonly engine = new IdempotencyEngine();
  /** @internal what the library logs by default (see the `logger` option) */
  readonly log: IdempotencyLog;

  /** `options.onEvent` and the default log, combined into one listener. */
  private readonly onEvent: IdempotencyEventListener;
  /** Stores whose own events (evictions, background purges) reach `onEvent`, and how to stop listening. */
  private readonly watchedStores = new Map<IdempotencyStore, () => void>();
  /** What every policy of this module inherits (see `policy()`). */
  private readonly policyDefaults: PolicyDefaults;
  /** Every store this module uses (its own and the handlers'), closed once on shutdown. */
  private readonly knownStores = new Set<IdempotencyStore>();

  constructor(@Optional() @Inject(IDEMPOTENCY_MODULE_OPTIONS) options?: IdempotencyModuleOptions) {
    this.options = options ?? {};
    this.store = this.options.store ?? new MemoryIdempotencyStore();
    this.log = new IdempotencyLog(this.options.logger === false ? undefined : (this.options.logger ?? new Logger('Idempotency')));
    const onEvent = this.options.onEvent;
    this.onEvent = combineListeners(...(isListenerList(onEvent) ? onEvent : [onEvent]), this.log.listener);
    this.watchStore(this.store);
    const { ttl, leaseTtl, waitTimeout, cacheErrors, onStoreError, maxResponseBytes } = this.options;
    this.policyDefaults = {
      store: this.store,
      ttl,
      leaseTtl,
      waitTimeout,
      cacheErrors,
      onStoreError,
      maxResponseBytes,
      onEvent: this.onEvent,
    };
  }

  /** @internal Routes a store's own events (memory evictions, purge failures) to this module's listeners and log. */
  watchStore(store: IdempotencyStore): void {
    this.knownStores.add(store);
    if (this.watchedStores.has(store) || typeof store.addEventListener !== 'function') return;
    this.watchedStores.set(store, store.addEventListener(this.onEvent));
  }

  /** @internal A configuration error found at boot or while serving a request: logged (rate-limited), with the fix. */
  reportConfigurationError(where: string, error: IdempotencyError): void {
    this.log.configurationError(where, error);
  }

  async onModuleDestroy(): Promise<void> {
    for (const stop of this.watchedStores.values()) stop();
    this.watchedStores.clear();
    // What the stores opened themselves (the Redis near cache's connection); each once.
    const stores = [...this.knownStores];
    this.knownStores.clear();
    for (const store of stores) {
      if (typeof store.close !== 'function') continue;
      try {
        await store.close();
      } catch (error) {
        const name = store.constructor.name;
        this.log.warn(`close:${name}`, `${name} failed to close: ${(error as Error)?.message ?? String(error)}`);
      }
    }
  }

  /**
   * Runs `fn` once per key: concurrent duplicates wait for the first and get its
   * result, later ones get the stored result, and a thrown error releases the key.
   */
  async run<T>(key: string, fn: () => Promise<T> | T, options: RunOptions = {}): Promise<T> {
    const handler = 'run:' + (options.scope ?? 'service');
    const request = {
      key: storageKeyOf(scopeOf(handler), normalizeIdempotencyKey(key)),
      fingerprint: options.fingerprint === undefined ? undefined : fingerprintOf(options.fingerprint),
    };
    const { value } = await this.engine.execute(request, this.policy(handler, options), fn);
    return value;
  }

  /**
   * The record behind a client key (support tooling), `undefined` when there is none:
   * `status: 'in_progress'` with `leaseExpiresAt` (epoch ms), or `status: 'completed'`
   * with `expiresAt` and `response`, the stored answer decoded as a duplicate gets it
   * (`{ kind: 'value', value, status, headers }`: `value` is the HTTP body, or the
   * faithful copy an in-process entry point returns, a `Date`, `Map` or `bigint` as
   * itself; `{ kind: 'error', ... }`; `{ kind: 'unstorable', reason }`). `result` stays
   * the store's encoded string, for copying a record as it is.
   */
  async inspect(key: string, locator: RecordLocator = {}): Promise<InspectedRecord | undefined> {
    const record = await this.store.get(this.locate(key, locator));
    if (record?.status !== 'completed') return record;
    return { ...record, response: this.decodeResult(record)! };
  }

  /**
   * What a completed record answers duplicates with, decoded: the value (an HTTP body)
   * with its stored status and headers, a cached error, or why nothing could be stored.
   * `undefined` for a record still in progress.
   */
  decodeResult(record: IdempotencyRecord): StoredResponse | undefined {
    if (record.status !== 'completed') return undefined;
    const outcome = deserializeOutcome(record.result);
    switch (outcome.kind) {
      case 'value':
        return { kind: 'value', value: decodeValue(outcome.value), status: outcome.meta?.status, headers: outcome.meta?.headers };
      case 'error':
        return {
          kind: 'error',
          name: outcome.error.name,
          message: outcome.error.message,
          body: outcome.error.props?.body,
          status: outcome.meta?.status,
        };
      default:
        return { kind: 'unstorable', reason: outcome.reason };
    }
  }

  /** Deletes the record of a key so that it can run again (support tooling). True when one existed. */
  async forget(key: string, locator: RecordLocator = {}): Promise<boolean> {
    return this.store.delete(this.locate(key, locator));
  }

  /**
   * @internal The policy of `run()` calls and of `@Idempotent()` handlers: their own
   * options over the module's (`resolvePolicy`). `inFlight` is not inherited: each entry
   * point passes its own default.
   */
  policy(handler: string, overrides: PolicyOptions = {}): ExecutionPolicy {
    return resolvePolicy(handler, overrides, this.policyDefaults);
  }

  private locate(key: string, locator: RecordLocator): string {
    return storageKeyOf(
      scopeOf(locator.operation ?? locator.handler ?? 'run:service', principalOf(locator.principal, 'IdempotencyService record locator')),
      normalizeIdempotencyKey(key),
    );
  }
}

function isListenerList(
  onEvent: IdempotencyEventListener | readonly IdempotencyEventListener[] | undefined,
): onEvent is readonly IdempotencyEventListener[] {
  return Array.isArray(onEvent);
}
