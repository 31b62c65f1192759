import { errorChainOf, type ErrorClass } from '../../../core/cached-errors.js';
import { decodeError, encodeJsonError, type EncodedError } from '../../../core/outcome.js';
import { replayedError } from '../../replayed-error.js';

type WsExceptionClass = new (error: string | object) => Error & { getError(): string | object };

let wsExceptionClass: WsExceptionClass | undefined;
let loading: Promise<WsExceptionClass | undefined> | undefined;

/**
 * Loads `WsException` on first use. Nest's WebSocket exception filter sends a client the
 * payload of an error only when it is `instanceof WsException` (anything else becomes
 * "Internal server error"), so a real one is needed; a dynamic import keeps
 * @nestjs/websockets optional for applications without gateways, in the ESM and CJS builds.
 */
export function loadWsException(): Promise<WsExceptionClass | undefined> {
  loading ??= import('@nestjs/websockets').then(
    (websockets) => (wsExceptionClass = websockets.WsException as unknown as WsExceptionClass),
    () => undefined,
  );
  return loading;
}

/**
 * A `WsException` carrying `body`, once `loadWsException()` has resolved (the adapter
 * loads it when a module's runtime is created, and awaits it before a refusal). Until
 * then, or without @nestjs/websockets, a plain Error with the same fields.
 */
export function wsExceptionOf(body: string | object): Error {
  if (wsExceptionClass) return new wsExceptionClass(body);
  const error = new Error(typeof body === 'string' ? body : String((body as { message?: unknown }).message ?? 'WebSocket error'));
  if (typeof body === 'object') Object.assign(error, body);
  return error;
}

/** An error with `getError()` is a `WsException` (or an `RpcException`, stored alike): its payload is what the client saw. */
export function isWsExceptionLike(error: unknown): error is Error & { getError(): string | object } {
  return error instanceof Error && typeof (error as { getError?: unknown }).getError === 'function';
}

const WS_EXCEPTION_NAME = 'WsException';

/**
 * Stores an error as the JSON wire keeps it (see `encodeJsonError`); a `WsException` also
 * by its payload, so a replay sends the client the same `exception` event.
 */
export function encodeWsError(error: unknown): EncodedError {
  const encoded = encodeJsonError(error);
  if (!isWsExceptionLike(error) || !errorChainOf(error).includes(WS_EXCEPTION_NAME)) return encoded;
  return { ...encoded, props: { wsError: error.getError() } };
}

/**
 * A cached error, as a replay throws it again to the gateway's exception filters: on the
 * nearest class of its chain that `cacheErrors` lists (see `replayedError`), else, for a
 * `WsException`, a new `WsException` with the same payload (`loadWsException()` must have
 * resolved), else as `replayedError` rebuilds it (Nest's filter answers it as unknown, as
 * the first time).
 */
export function replayedWsError(encoded: EncodedError, listed: readonly ErrorClass[] | undefined): Error {
  const wsError = encoded.props?.wsError as string | object | undefined;
  const chain = encoded.chain ?? [];
  if (!chain.includes(WS_EXCEPTION_NAME) || wsError === undefined) return replayedError(encoded, listed);
  if (!listed?.some((type) => chain.includes(type.name))) return wsExceptionOf(wsError);
  return decodeError(encoded, listed);
}
