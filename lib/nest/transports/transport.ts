import type { ExecutionContext } from '@nestjs/common';
import type { IdempotentOptions } from '../idempotency.options.js';
import type { ResolvedHandlerConfig, TransportAdapter } from '../transport.adapter.js';

/** A method decorated with `@Idempotent()`, as boot (the explorer) and its first call see it. */
export interface HandlerSite {
  /** The method (the `@Idempotent()` wrapper, carrying the metadata of every decorator on it). */
  readonly method: Function;
  /** The class it is called on. */
  readonly owner: Function;
  readonly propertyName: string;
  /** `Class.method`. */
  readonly handlerName: string;
}

/** A handler's options merged over the module's, as the transport rules see them. */
export type MergedOptions = IdempotentOptions & Record<string, unknown>;

/** A handler config before its transport adds what is its own (`Transport.configure`). */
export type BaseHandlerConfig = Omit<ResolvedHandlerConfig, 'keyHeaders' | 'replayHeaders'>;

/**
 * One transport: everything `@Idempotent()` does differently on it. The protocol
 * (`IdempotencyRuntime`) and the configuration pipeline (`resolveHandlerConfig`) are the
 * same for all; a transport says which handlers are its own, checks their options at boot,
 * adds its own fields to their config, and reads keys, operations, principals and
 * fingerprints, answers, replays and refuses (the `TransportAdapter` half). Every transport
 * is listed once, in transports/registry.ts.
 */
export interface Transport<C extends ResolvedHandlerConfig = ResolvedHandlerConfig> extends TransportAdapter {
  /** Its name in the registry; for a request transport, also `ExecutionContext.getType()` of its requests. */
  readonly name: string;
  /**
   * `'request'`: Nest calls the handler with an ExecutionContext of type `name` (a route, a
   * message, a GraphQL field). `'method'`: the method is called without a request (a
   * provider method, a job, a tick), and the library builds its `MethodExecutionContext`.
   */
  readonly reach: 'request' | 'method';
  /** Whether this transport serves the method: the first transport of the registry that recognises it does. */
  recognises(site: HandlerSite): boolean;
  /**
   * Options of the module this transport's handlers never inherit (they describe another
   * transport's requests). `undefined`: all are inherited.
   */
  readonly notInherited?: readonly string[];
  /**
   * This transport's own rules, run at boot for every handler it serves (and at its first
   * request): throws an `IdempotencyConfigurationError` whose message starts with `where`.
   * `own` are the options on the handler itself, `merged` the same over the module's.
   */
  validate?(where: string, merged: MergedOptions, own: IdempotentOptions, site: HandlerSite): void;
  /** The config the handler runs under: `base` (merged, validated, with its policy) with this transport's own fields. */
  configure(base: BaseHandlerConfig, own: IdempotentOptions, site: HandlerSite): C;
  /** Called when a module's runtime is created (before any request): where a transport starts watching what it must see first. */
  attach?(): void;
  /** Called once per application boot with its providers' instances, for a transport that needs one (the schedule's SchedulerRegistry). */
  boot?(providers: readonly unknown[]): void;
  /** The operation part of the scope of this request or call (`POST /v1/refunds/:id`, `rmq refund.create`). */
  operationOf(context: ExecutionContext, config: C): string;
}

/** The lower-case request headers a key is read from, in order: the `header` option, then the other usual name. */
export function keyHeadersOf(options: IdempotentOptions): readonly string[] {
  const header = (options.header ?? 'Idempotency-Key').toLowerCase();
  return header === 'x-idempotency-key' ? [header, 'idempotency-key'] : [header, 'x-idempotency-key'];
}

/** A config field the transports that replay no response headers share. */
export const NO_HEADERS: ReadonlySet<string> = new Set();

/**
 * Where the key of a handler that reads it from a header is expected, for the "missing
 * key" message: the `key` option, else the header (`detail` says where, e.g. "of the HTTP
 * request carrying the GraphQL operation").
 */
export function describeHeaderKeySource(options: IdempotentOptions, detail?: string): string {
  if (options.key) return 'the request (the key option returned nothing)';
  const header = `the ${options.header ?? 'Idempotency-Key'} header`;
  return detail ? `${header} ${detail}` : header;
}
