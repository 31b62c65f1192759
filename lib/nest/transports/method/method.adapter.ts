import type { ExecutionContext } from '@nestjs/common';
import {
  IdempotencyConfigurationError,
  encodeError,
  replayValue,
  valueOutcome,
  withoutTrailingUndefined,
  type IdempotencyError,
  type InFlightStrategy,
  type StoredOutcome,
} from '../../../core/index.js';
import { shown } from '../../../core/options.js';
import type { IdempotentOptions } from '../../idempotency.options.js';
import type { IdempotentMethodOptions } from '../../method-options.js';
import type { ResolvedHandlerConfig } from '../../transport.adapter.js';
import { NO_HEADERS, type BaseHandlerConfig, type HandlerSite, type MergedOptions, type Transport } from '../transport.js';
import { MethodExecutionContext } from './method-context.js';
import { targetOf, type MethodKind, type MethodTarget } from './method-target.js';

/** A handler config of an `@Idempotent()` method that runs without a request. */
export interface MethodHandlerConfig extends ResolvedHandlerConfig {
  readonly target: MethodTarget;
  /** The operation part of the scope: the `scope` option, else the target's. */
  readonly operation: string;
}

/** Options a method without a request has no use for: route headers and RabbitMQ acknowledgement. */
const REQUEST_ONLY_OPTIONS = ['header', 'replayHeaders', 'ack', 'maxDeliveries'] as const;
/** Options of the module that describe requests, never inherited by methods (their `key` reads a request). */
const NOT_INHERITED = ['key', 'scope', 'fingerprint', ...REQUEST_ONLY_OPTIONS] as const;

/**
 * A provider method called by your own code (or by an event emitter): the key is the
 * `key` option over the call's arguments, the fingerprint the arguments, and a
 * duplicate gets a faithful copy of the first call's value back (see structured-value.ts),
 * or its cached error thrown again, as `makeIdempotent` does. Errors of the library reach the caller as they are.
 *
 * The base of every transport of methods called without a request (BullMQ jobs, schedules):
 * they share its boot rules, its config (`MethodHandlerConfig`) and its context.
 */
export class MethodAdapter implements Transport<MethodHandlerConfig> {
  readonly name: string = 'method';
  readonly reach = 'method' as const;
  readonly defaultInFlight: InFlightStrategy = 'wait';
  readonly notInherited: readonly string[] = NOT_INHERITED;
  /** The kinds of method (`MethodTarget.kind`) this transport serves. */
  readonly kinds: readonly MethodKind[] = ['method'];
  /** Where the key comes from without a `key` option (`undefined`: there is none, refused at boot). */
  protected readonly defaultKeySource: string | undefined = undefined;
  /** What the key option was called for, in the "missing key" message. */
  protected readonly keyCall: string = ' for these arguments';

  recognises(site: HandlerSite): boolean {
    return this.kinds.includes(targetOf(site.method, site.owner, site.propertyName).kind);
  }

  /** The rules of every method called without a request, on its own options (the module's request options are not inherited). */
  validate(where: string, _merged: MergedOptions, own: IdempotentOptions, site: HandlerSite): void {
    const target = targetOf(site.method, site.owner, site.propertyName);
    const fail = (problem: string, fix: string): never => {
      throw new IdempotencyConfigurationError(`${where}: ${problem}`, fix);
    };
    const ownRecord = own as Record<string, unknown>;
    for (const name of REQUEST_ONLY_OPTIONS) {
      if (ownRecord[name] !== undefined) {
        fail(
          `${name} does not apply to ${describe(target)}: it has no ${name === 'ack' || name === 'maxDeliveries' ? 'RabbitMQ delivery to acknowledge' : 'HTTP request or response'}.`,
          `Remove ${name} from this @Idempotent().`,
        );
      }
    }
    const { key, scope, fingerprint } = own as IdempotentMethodOptions;
    if (key !== undefined && typeof key !== 'function') {
      fail(
        `key must be a function of the method's arguments, got ${shown(key)}.`,
        'Pass key: (...args) => a string that identifies the operation.',
      );
    }
    if (scope !== undefined && (typeof scope !== 'string' || scope.length === 0)) {
      fail(
        `scope on ${describe(target)} is the name of its operation (a non-empty string), got ${typeof scope === 'function' ? 'a function' : shown(scope)}.`,
        `Pass scope: '${target.operation}' (the default), or put who is asking into the key instead: key: (order) => \`\${order.tenantId}:\${order.id}\`.`,
      );
    }
    if (scope === undefined && target.namedByClass && target.handlerName.startsWith('.')) {
      fail(
        `its class has no name, so its default scope ('${target.operation}') would not tell it from any other nameless class's method.`,
        `Name the class (class RefundService { ... }), or pass scope: 'refunds.refund' (a name of your own for this operation).`,
      );
    }
    if (fingerprint !== undefined && fingerprint !== false && typeof fingerprint !== 'function') {
      fail('fingerprint must be false or a function of the method arguments.', 'Pass fingerprint: (...args) => material, or false.');
    }
    if (key === undefined && target.kind === 'method') {
      fail(
        `${describe(target)} has no request to read an idempotency key from, so it needs a key option; without one every call would run unprotected.`,
        target.events
          ? `Derive the key from the event's payload: @Idempotent({ key: (event: OrderPaid) => event.orderId }).`
          : `Derive the key from the call's arguments: @Idempotent({ key: (refund: RefundRequest) => refund.id }). For an HTTP route, declare the method with @Post() (or @Put(), ...) in a controller instead.`,
      );
    }
  }

  /** The runtime hands key and fingerprint functions the context: the method's hand them the call's arguments. */
  configure(base: BaseHandlerConfig, own: IdempotentOptions, site: HandlerSite): MethodHandlerConfig {
    const target = targetOf(site.method, site.owner, site.propertyName);
    const { key, scope, fingerprint } = own as IdempotentMethodOptions;
    const options: Record<string, unknown> = { ...base.options };
    if (key) options.key = (context: MethodExecutionContext) => key(...context.getArgs());
    if (fingerprint === false || (fingerprint === undefined && (target.kind === 'cron' || target.kind === 'interval'))) {
      options.fingerprint = false;
    } else if (typeof fingerprint === 'function') {
      options.fingerprint = (context: MethodExecutionContext) => fingerprint(...context.getArgs());
    }
    return {
      ...base,
      options: options as MethodHandlerConfig['options'],
      keyHeaders: [],
      replayHeaders: NO_HEADERS,
      target,
      operation: scope ?? target.operation,
    };
  }

  /** Carried by the call's context (`method RefundService.refund`, `bullmq refunds`), else by its config. */
  operationOf(context: ExecutionContext, config: MethodHandlerConfig): string {
    return context instanceof MethodExecutionContext ? context.operation : config.operation;
  }

  /** What the caller of the method gets: the protocol's answer (a schedule skips a tick another instance runs). */
  finish(answer: Promise<unknown>): Promise<unknown> {
    return answer;
  }

  /** Without a `key` option a provider method has no key (refused at boot). */
  readKey(_context: ExecutionContext, _config: ResolvedHandlerConfig): unknown {
    return undefined;
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return config.options.key || this.defaultKeySource === undefined
      ? `the key option of ${config.handlerName} (it returned nothing${this.keyCall})`
      : this.defaultKeySource;
  }

  principal(): undefined {
    return undefined;
  }

  /** The arguments; `f(x, undefined)` is the call `f(x)`. */
  fingerprintMaterial(context: ExecutionContext): unknown {
    return withoutTrailingUndefined(context.getArgs());
  }

  /** In process, nothing JSON-shaped in between: the value is stored faithfully (Date, Map, bigint...). */
  captureValue(_context: ExecutionContext, value: unknown): StoredOutcome {
    return valueOutcome(value, 'faithful');
  }

  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    return { kind: 'error', error: encodeError(error) };
  }

  replay(_context: ExecutionContext, outcome: StoredOutcome, config: ResolvedHandlerConfig): unknown {
    return replayValue(outcome, config.policy.errorClasses);
  }

  toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    return error;
  }
}

function describe(target: MethodTarget): string {
  switch (target.kind) {
    case 'bullmq':
      return `${target.handlerName} (a BullMQ processor)`;
    case 'cron':
    case 'interval':
      return `${target.handlerName} (a scheduled job)`;
    default:
      return target.events
        ? `${target.handlerName} (an @OnEvent('${target.events.join("', '")}') listener)`
        : `${target.handlerName} (a provider method)`;
  }
}
