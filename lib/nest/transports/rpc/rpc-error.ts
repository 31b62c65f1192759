import { IdempotencyInFlightError, type EncodedError, type IdempotencyError } from '../../../core/index.js';
import { problemOf, type IdempotencyProblem } from '../../problem.js';

/**
 * What a microservice client receives as the error of a refused message: the fields of
 * the HTTP problem body (same stable `code`), plus `message` as Nest's RPC clients
 * expect it.
 *
 * @example
 * client.send('refund', data).subscribe({
 *   error: (err) => { if (isIdempotencyRpcError(err) && err.code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT') retryLater(); },
 * });
 */
export interface IdempotencyRpcError extends IdempotencyProblem {
  /** The same text as `detail`. */
  readonly message: string;
  /** For `IDEMPOTENCY_REQUEST_IN_FLIGHT`: suggested wait before retrying, ms. */
  readonly retryAfterMs?: number;
}

/** True for the error body of one of this library's refusals, as a microservice client receives it. */
export function isIdempotencyRpcError(value: unknown): value is IdempotencyRpcError {
  const candidate = value as Partial<IdempotencyRpcError> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.code === 'string' &&
    candidate.code.startsWith('IDEMPOTENCY_') &&
    typeof candidate.status === 'number'
  );
}

export function rpcErrorBodyOf(error: IdempotencyError): IdempotencyRpcError {
  const problem = problemOf(error);
  const body: IdempotencyRpcError = { ...problem, message: problem.detail };
  return error instanceof IdempotencyInFlightError || (error as IdempotencyInFlightError).retryAfterMs
    ? { ...body, retryAfterMs: (error as IdempotencyInFlightError).retryAfterMs }
    : body;
}

type RpcExceptionClass = new (error: string | object) => Error & { getError(): string | object };

let rpcExceptionClass: RpcExceptionClass | undefined;
let loading: Promise<RpcExceptionClass | undefined> | undefined;

/**
 * Loads `RpcException` on first use. Nest's RPC exception filter forwards an error to
 * the client only when it is `instanceof RpcException` (anything else becomes
 * "Internal server error"), so a real one is needed; a dynamic import keeps
 * @nestjs/microservices optional for HTTP-only applications, in the ESM and CJS builds.
 */
export function loadRpcException(): Promise<RpcExceptionClass | undefined> {
  loading ??= import('@nestjs/microservices').then(
    (microservices) => (rpcExceptionClass = microservices.RpcException as unknown as RpcExceptionClass),
    () => undefined,
  );
  return loading;
}

/**
 * An `RpcException` carrying `body`, once `loadRpcException()` has resolved (the adapter
 * awaits it before any error is raised). Until then, or without @nestjs/microservices,
 * a plain Error with the same fields.
 */
export function rpcExceptionOf(body: string | object): Error {
  if (rpcExceptionClass) return new rpcExceptionClass(body);
  const error = new Error(typeof body === 'string' ? body : String((body as { message?: unknown }).message ?? 'RPC error'));
  if (typeof body === 'object') Object.assign(error, body);
  return error;
}

/** An error with `getError()` is an `RpcException` (or a subclass): its payload is what the client saw. */
export function isRpcExceptionLike(error: unknown): error is Error & { getError(): string | object } {
  return error instanceof Error && typeof (error as { getError?: unknown }).getError === 'function';
}

const RPC_EXCEPTION_NAME = 'RpcException';

/** Stores an `RpcException` by its payload, so a replay sends the client the same error. */
export function encodeRpcException(error: Error & { getError(): string | object }): EncodedError {
  return { name: RPC_EXCEPTION_NAME, message: error.message, props: { rpcError: error.getError() } };
}

export function isEncodedRpcException(encoded: EncodedError): boolean {
  return encoded.name === RPC_EXCEPTION_NAME && encoded.props !== undefined && 'rpcError' in encoded.props;
}
