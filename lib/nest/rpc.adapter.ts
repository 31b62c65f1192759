import type { ExecutionContext } from '@nestjs/common';
import { Observable, of, throwError } from 'rxjs';
import {
  decodeValue,
  encodeError,
  encodeValue,
  unstorableReason,
  IdempotencyNotReplayableError,
  decodeError,
  type IdempotencyError,
  type StoredOutcome,
} from '../core/index.js';
import type { ResolvedHandlerConfig, TransportAdapter } from './transport.adapter.js';

/** Microservice handlers (@MessagePattern / @EventPattern). */
export class RpcTransportAdapter implements TransportAdapter {
  readonly defaultInFlight = 'wait' as const;

  readKey(_context: ExecutionContext, _config: ResolvedHandlerConfig): unknown {
    return undefined;
  }

  describeKeySource(): string {
    return 'the message (set the key option of @Idempotent())';
  }

  principal(): undefined {
    return undefined;
  }

  fingerprintMaterial(context: ExecutionContext): unknown {
    return context.switchToRpc().getData() ?? null;
  }

  captureValue(_context: ExecutionContext, value: unknown): StoredOutcome {
    const reason = unstorableReason(value);
    return reason ? { kind: 'unstorable', reason } : { kind: 'value', value: encodeValue(value) };
  }

  captureError(_context: ExecutionContext, error: unknown): StoredOutcome {
    return { kind: 'error', error: encodeError(error) };
  }

  replay(_context: ExecutionContext, outcome: StoredOutcome): Observable<unknown> {
    if (outcome.kind === 'value') return of(decodeValue(outcome.value));
    if (outcome.kind === 'error') return throwError(() => decodeError(outcome.error));
    return throwError(() => new IdempotencyNotReplayableError(outcome.reason));
  }

  toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    return error;
  }
}
