import { errorChainOf, type ErrorClass } from '../../../core/cached-errors.js';
import { IdempotencyInFlightError, decodeError, encodeJsonError, type EncodedError, type IdempotencyError } from '../../../core/index.js';
import { problemOf, type IdempotencyProblem } from '../../problem.js';
import { replayedError } from '../../replayed-error.js';

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

/**
 * Stores an `RpcException` by its payload, so a replay sends the client the same error;
 * with its class chain and own fields, so that a subclass `cacheErrors` lists comes back as
 * itself (a filter catching it catches the replay).
 */
export function encodeRpcException(error: Error & { getError(): string | object }): EncodedError {
  return {
    name: RPC_EXCEPTION_NAME,
    message: error.message,
    props: { rpcError: error.getError() },
    chain: errorChainOf(error),
    fields: encodeJsonError(error).fields,
  };
}

/**
 * A cached error, as a replay throws it again to the application's RPC exception filters
 * (an `RpcExceptionFilter` or `BaseRpcExceptionFilter` subclass answering a domain error
 * with a payload of its own): rebuilt on the nearest class of its chain that `cacheErrors`
 * lists (see `replayedError`). An `RpcException` whose chain names no listed class is a
 * new `RpcException` carrying the same payload, as before; `loadRpcException()` must have
 * resolved.
 */
export function replayedRpcError(encoded: EncodedError, listed: readonly ErrorClass[] | undefined): Error {
  if (!isEncodedRpcException(encoded)) return replayedError(encoded, listed);
  const chain = encoded.chain ?? [];
  const rpcError = encoded.props!.rpcError as string | object;
  if (!listed?.some((type) => chain.includes(type.name))) return rpcExceptionOf(rpcError);
  const fields = encoded.fields ?? { error: rpcError, message: encoded.message };
  const error = decodeError({ ...encoded, fields }, listed);
  // RpcException sets no name of its own: its class's is the one it had.
  if (!Object.prototype.hasOwnProperty.call(fields, 'name')) delete (error as { name?: string }).name;
  return error;
}

export function isEncodedRpcException(encoded: EncodedError): boolean {
  return encoded.name === RPC_EXCEPTION_NAME && encoded.props !== undefined && 'rpcError' in encoded.props;
}
