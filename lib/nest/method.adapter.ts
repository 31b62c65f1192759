import type { ExecutionContext } from '@nestjs/common';
import {
  encodeError,
  replayValue,
  valueOutcome,
  withoutTrailingUndefined,
  type IdempotencyError,
  type InFlightStrategy,
  type StoredOutcome,
} from '../core/index.js';
import type { MethodTarget } from './method-target.js';
import type { ResolvedHandlerConfig, TransportAdapter } from './transport.adapter.js';

/** A handler config of an `@Idempotent()` method that runs without a request. */
export interface MethodHandlerConfig extends ResolvedHandlerConfig {
  readonly target: MethodTarget;
  /** The operation part of the scope: the `scope` option, else the target's. */
  readonly operation: string;
}

/**
 * A provider method called by your own code (or by an event emitter): the key is the
 * `key` option over the call's arguments, the fingerprint the arguments, and a
 * duplicate gets a faithful copy of the first call's value back (see structured-value.ts),
 * or its cached error thrown again, as `makeIdempotent` does. Errors of the library reach the caller as they are.
 */
export class MethodAdapter implements TransportAdapter {
  readonly defaultInFlight: InFlightStrategy = 'wait';

  /** Without a `key` option a provider method has no key (refused at boot). */
  readKey(_context: ExecutionContext, _config: ResolvedHandlerConfig): unknown {
    return undefined;
  }

  describeKeySource(config: ResolvedHandlerConfig): string {
    return `the key option of ${config.handlerName} (it returned nothing for these arguments)`;
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

  replay(_context: ExecutionContext, outcome: StoredOutcome, _config: ResolvedHandlerConfig): unknown {
    return replayValue(outcome);
  }

  toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    return error;
  }
}
