import { isObservable, type Subscription } from 'rxjs';

/**
 * The handler's side of one execution, called by the method wrapper of `@Idempotent()`.
 * Nest awaits what the wrapper returns and has no way to withdraw from a promise; the one
 * cancellation is the caller leaving the outermost layer (`AnswerFrame.cancel()`), which
 * `stop()`s a handler that answers with an Observable.
 */
export class HandlerCall {
  /** The handler threw: its error is settled and answers as it is, never as a refusal. */
  failed = false;
  private subscription?: Subscription;

  constructor(private readonly invoke: () => unknown) {}

  /** Runs the handler; resolves with its value, or an Observable's last one (`undefined` when it emitted none), as in Nest. */
  run(): Promise<unknown> {
    try {
      const result = this.invoke();
      if (!isObservable(result)) return Promise.resolve(result);
      return new Promise((resolve, reject) => {
        let last: unknown;
        this.subscription = result.subscribe({ next: (value) => (last = value), error: reject, complete: () => resolve(last) });
      });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Unsubscribes from a handler that answers with an Observable. */
  stop(): void {
    this.subscription?.unsubscribe();
  }
}
