import type { CallHandler } from '@nestjs/common';
import { isObservable, type Subscription } from 'rxjs';
import type { Lease } from '../core/index.js';
import { NO_REPLY } from './transport.adapter.js';

/** The handler's side of one execution: how to run it, and whether its caller went away. */
export interface HandlerCall {
  cancelled: boolean;
  /** The handler threw: its error is settled and answers as it is, never as a refusal. */
  failed: boolean;
  /** What to answer when there is nothing to send back. */
  readonly noReply: unknown;
  /** Set once the key is claimed, so that a cancellation can abandon it. */
  lease?: Lease;
  /** Runs the handler; resolves with its last value (`NO_REPLY` when it produced none). */
  run(): Promise<unknown>;
  /** Unsubscribes from a handler that answers with an Observable. */
  stop?(): void;
}

/**
 * A handler reached through Nest's interceptor chain (`next.handle()`): the caller
 * may unsubscribe before it ends, which is the one cancellation Nest delivers.
 */
export class ObservableHandlerCall implements HandlerCall {
  cancelled = false;
  failed = false;
  readonly noReply = NO_REPLY;
  /** The handler ended (value or error): too late to abandon its lease. */
  finished = false;
  lease?: Lease;
  private subscription?: Subscription;

  constructor(private readonly next: CallHandler) {}

  run(): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let last: unknown = NO_REPLY;
      this.subscription = this.next.handle().subscribe({
        next: (value) => (last = value),
        error: (error: unknown) => {
          this.finished = true;
          reject(error);
        },
        complete: () => {
          this.finished = true;
          resolve(last);
        },
      });
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
  }
}

/**
 * A handler called by the method wrapper of `@Idempotent()`. Nest awaits what the
 * wrapper returns and has no way to withdraw from a promise; the one cancellation is the
 * caller leaving the outermost layer (`AnswerFrame.cancel()`), which `stop()`s a handler
 * that answers with an Observable.
 */
export class DirectHandlerCall implements HandlerCall {
  readonly cancelled = false;
  failed = false;
  readonly noReply = undefined;
  lease?: Lease;
  private observed?: ObservableHandlerCall;

  constructor(private readonly invoke: () => unknown) {}

  run(): Promise<unknown> {
    try {
      const result = this.invoke();
      if (!isObservable(result)) return Promise.resolve(result);
      // A handler may return an Observable: its last value answers, as in Nest.
      this.observed = new ObservableHandlerCall({ handle: () => result });
      return this.observed.run().then((value) => (value === NO_REPLY ? undefined : value));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  stop(): void {
    this.observed?.stop();
  }
}
