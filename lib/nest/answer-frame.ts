import type { ExecutionContext } from '@nestjs/common';
import { describeError } from '../observability/logger.js';
import type { Lease } from '../core/engine.js';
import type { IdempotencyHooks } from './idempotency-hooks.js';
import { NO_REPLY, type ResolvedHandlerConfig } from './transport.adapter.js';

/**
 * How the outermost layer settles an execution whose handler has ended: with the answer
 * the caller is about to get (after every interceptor of the application), or with the
 * error the chain ended in instead. Each resolves once the answer is stored (committed),
 * and rejects with the error the caller gets when it could not be.
 */
export interface PendingAnswer {
  value(answer: unknown): Promise<void>;
  error(failure: unknown): Promise<void>;
  /** The caller went away before the answer: the outcome is unknown, so nothing is stored or released. */
  cancel(): void;
}

/**
 * The outermost layer of one request (message, GraphQL field call) to an `@Idempotent()`
 * handler, opened by `IdempotencyInterceptor` before any other interceptor of the
 * application runs. The protocol itself still runs in `@Idempotent()`'s method wrapper,
 * after guards, pipes and inner interceptors (multer's included), so that it sees the
 * request as the handler does; the frame is how it answers at the outside:
 *
 * - a first execution leaves `pending` here instead of storing the handler's raw value,
 *   and the interceptor stores the answer the chain produced from it
 *   (`ClassSerializerInterceptor`'s output, not the class with its `@Exclude()` fields);
 * - a replay leaves `replay` here and lets the chain end without a value, so that no
 *   inner interceptor maps the stored answer a second time.
 */
export class AnswerFrame {
  /** The stored answer the interceptor sends instead of whatever the chain ends with. */
  replay?: { readonly value: unknown } | { readonly error: unknown };
  /** Set when the handler ended under a lease: the interceptor settles it with the chain's outcome. */
  pending?: PendingAnswer;
  /** Set while the handler runs under a lease: stops it and abandons the lease when the caller goes away. */
  onCancel?: () => void;
  /** The caller unsubscribed (the answer will never be sent). */
  cancelled = false;
  /** How the chain ended, when it ended before the handler's answer was pending (an inner `timeout()`). */
  private endedEarly?: { readonly value: unknown } | { readonly error: unknown };

  /**
   * The handler ended under a lease: the interceptor settles `pending` with the chain's
   * outcome. When the chain has ended already (an interceptor inside gave up on the
   * handler, whose caller got that), it is settled with that outcome now: nothing else
   * would, and the lease would be renewed for as long as the process lives.
   */
  settleWith(pending: PendingAnswer): void {
    const ended = this.endedEarly;
    if (!ended) {
      this.pending = pending;
      return;
    }
    // The lease and the transaction report their own store errors.
    void ('error' in ended ? pending.error(ended.error) : pending.value(ended.value)).catch(() => undefined);
  }

  /** The chain ended with `outcome`: the pending answer to settle with it, if the handler has ended. */
  takePending(outcome: { value: unknown } | { error: unknown }): PendingAnswer | undefined {
    const pending = this.pending;
    this.pending = undefined;
    if (!pending) this.endedEarly = outcome;
    return pending;
  }

  /** The caller went away before the answer: its outcome is unknown, so the key stays leased. */
  cancel(): void {
    this.cancelled = true;
    if (this.pending) this.pending.cancel();
    else this.onCancel?.();
  }

  constructor(
    /** The hooks of the `IdempotencyInterceptor` subclass that opened the frame, when it overrides them. */
    readonly hooks: IdempotencyHooks | undefined,
  ) {}
}

/**
 * Frames by the object that stands for one request: a set rather than a mark on the
 * object, as requests and transport contexts belong to the framework (a property would
 * change their shape, and a frozen one refuses it).
 */
const frames = new WeakMap<object, AnswerFrame>();

/** Opens the frame of this request; `undefined` when an outer registration already did. */
export function openFrame(context: ExecutionContext, hooks: IdempotencyHooks | undefined): AnswerFrame | undefined {
  const carrier = carrierOf(context) ?? context;
  if (frames.has(carrier)) return undefined;
  const frame = new AnswerFrame(hooks);
  frames.set(carrier, frame);
  return frame;
}

/** The frame an outer `IdempotencyInterceptor` opened for this request, if any. */
export function frameOf(context: ExecutionContext): AnswerFrame | undefined {
  const carrier = carrierOf(context);
  return carrier ? frames.get(carrier) : undefined;
}

/**
 * The object that stands for one request or message: the HTTP request, the transport's
 * message context, a GraphQL field call's arguments. The interceptor's and the wrapper's
 * contexts of one call share it.
 */
function carrierOf(context: ExecutionContext): object | undefined {
  const args = typeof context.getArgs === 'function' ? context.getArgs() : undefined;
  if (!args) return undefined;
  const type = context.getType();
  // A gateway message has none: Nest's WebSocket adapters unsubscribe every message of a
  // socket that disconnects, and a handler that runs on after its caller left must store
  // its answer for the re-send after the reconnect, not abandon its key (the wrapper
  // stores the handler's value; the socket, args[0], is shared by every message anyway).
  if (type === 'ws') return undefined;
  const candidate: unknown = type === 'http' ? args[0] : (args[1] ?? args[0]);
  return typeof candidate === 'object' && candidate !== null ? candidate : undefined;
}

/**
 * How the outermost layer settles a lease whose handler has ended: the chain's answer is
 * stored as the answer. An error the chain ends in is stored as the answer when the
 * handler's own error was one `cacheErrors` selected; after a handler that succeeded it
 * makes the execution not replayable instead (its effect happened, but what its caller
 * got is not its answer), so that no retry runs it a second time.
 */
export function pendingUnderLease(
  context: ExecutionContext,
  config: ResolvedHandlerConfig,
  lease: Lease,
  handlerFailed: boolean,
): PendingAnswer {
  const adapter = config.adapter;
  const settle = async (stored: Promise<void>) => {
    await stored;
    if (adapter.settle) await adapter.settle(context, config, 'stored');
  };
  return {
    value: (answer) => settle(lease.complete(adapter.captureValue(context, answer === NO_REPLY ? undefined : answer, config))),
    error: (failure) =>
      settle(
        handlerFailed
          ? lease.storeError(adapter.captureError(context, failure, config))
          : lease.complete({ kind: 'unstorable', reason: `the answer failed after the handler had run (${describeError(failure)})` }),
      ),
    cancel: () => abandonLease(context, config, lease),
  };
}

/** The caller went away: the key stays leased until its lease runs out, and the transport hears it (a message is left unacked). */
export function abandonLease(context: ExecutionContext, config: ResolvedHandlerConfig, lease: Lease): void {
  lease.abandon();
  void config.adapter.settle?.(context, config, 'abandoned');
}
