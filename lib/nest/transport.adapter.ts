import type { ExecutionContext } from '@nestjs/common';
import type { ExecutionPolicy, IdempotencyError, InFlightStrategy, StoredOutcome } from '../core/index.js';
import type { IdempotentOptions } from './idempotency.options.js';
import type { IdempotencyPrincipal } from './principal.js';

/** What `TransportAdapter.replay` returns when nothing is sent back (a duplicate event). */
export const NO_REPLY: unique symbol = Symbol.for('nestjs-idempotency:no-reply');

/** Options of one handler merged with the module defaults, computed once per handler and transport. */
export interface ResolvedHandlerConfig {
  /** `Controller.method`, the handler part of every key's scope. */
  readonly handlerName: string;
  readonly options: Readonly<IdempotentOptions> & Readonly<Record<string, unknown>>;
  readonly policy: ExecutionPolicy;
  readonly required: boolean;
  /** Lower-case request headers the key is read from, in order. */
  readonly keyHeaders: readonly string[];
  /** Lower-case response headers stored and replayed. */
  readonly replayHeaders: ReadonlySet<string>;
  /** The transport this handler is served on. */
  readonly adapter: TransportAdapter;
}

/** How an execution ended, for transports that acknowledge messages. */
export type Settlement =
  /** The handler ran and its outcome was stored (or it failed and its error was cached). */
  | 'stored'
  /** A stored outcome was replayed; the handler did not run. */
  | 'replayed'
  /** The handler threw and the key was released. */
  | 'failed'
  /** Refused before running: in flight, mismatch, missing key, store down. */
  | 'rejected'
  /** The caller went away; the key stays leased. */
  | 'abandoned'
  /**
   * The handler ran without protection and has ended: the store failed under
   * fail-open, or there was no key and the handler does not require one.
   */
  | 'unprotected';

/**
 * What differs between HTTP and each microservice transport. `IdempotencyRuntime` owns
 * the protocol; an adapter only reads keys and turns outcomes into that transport's answers.
 */
export interface TransportAdapter {
  readonly defaultInFlight: InFlightStrategy;
  /**
   * Runs first, before the key is read (so also before a `key` option): throws when
   * this request or message cannot be served as configured (an `ack: true` consumer in
   * auto-ack mode). Its error is settled and answered like any other refusal.
   */
  admit?(context: ExecutionContext, config: ResolvedHandlerConfig): void | Promise<void>;
  /** The raw client key when no `key` option is given; `undefined` when there is none. */
  readKey(context: ExecutionContext, config: ResolvedHandlerConfig): unknown;
  /** Where the key is expected, for the "missing key" message. */
  describeKeySource(config: ResolvedHandlerConfig, context?: ExecutionContext): string;
  /**
   * The default principal (user, tenant) of the scope: an `IdempotencyPrincipal` (typed,
   * with its source), a string or number (taken as the `scope` option's), or `undefined`
   * for an anonymous caller.
   */
  principal(context: ExecutionContext): IdempotencyPrincipal | string | number | undefined;
  /** The default fingerprint material. */
  fingerprintMaterial(context: ExecutionContext): unknown;
  captureValue(context: ExecutionContext, value: unknown, config: ResolvedHandlerConfig): StoredOutcome;
  captureError(context: ExecutionContext, error: unknown, config: ResolvedHandlerConfig): StoredOutcome;
  /**
   * The answer to a duplicate: the stored value (after setting what the transport
   * replays, e.g. status and headers), `NO_REPLY`, or a thrown error.
   */
  replay(context: ExecutionContext, outcome: StoredOutcome, config: ResolvedHandlerConfig): unknown;
  /** The error to raise for one of this library's errors (an HttpException, an RpcException). */
  toTransportError(context: ExecutionContext, error: IdempotencyError): unknown;
  /**
   * Loads what `toTransportError` needs where that takes a dynamic import (RpcException),
   * for an error the handler threw. A refusal is settled as `'rejected'` first, which loads it.
   */
  prepareErrors?(): Promise<unknown>;
  /**
   * Runs after the outcome is settled (stored, replayed, released): where messages get
   * acknowledged. `error` is what was thrown, for `'failed'` and `'rejected'`.
   */
  settle?(context: ExecutionContext, config: ResolvedHandlerConfig, settlement: Settlement, error?: unknown): void | Promise<void>;
}
