/**
 * What the `statementTimeout` decorator (deadline.ts) tells an implementation about one
 * bounded operation: whether it ran past its deadline (`aborted`, `reason`) and, through
 * `onDeadline`, what to do then (destroy the stuck connection instead of returning it).
 *
 * Not an AbortSignal on purpose: every statement of a store carries one, and on Node 20
 * creating an AbortController costs about 2 µs and an `addEventListener` /
 * `removeEventListener` pair about 6 µs, more than the rest of a bounded statement.
 *
 * Not part of the public API.
 */
export class DeadlineSignal {
  aborted = false;
  reason: Error | undefined;
  private hooks: Array<() => void> | undefined;

  /** Marks the operation past its deadline and runs what `onDeadline` registered, once. */
  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const hooks = this.hooks;
    this.hooks = undefined;
    if (hooks) for (const hook of hooks) hook();
  }

  /** @see onDeadline */
  watch(fn: () => void): () => void {
    if (this.aborted) {
      fn();
      return noop;
    }
    (this.hooks ??= []).push(fn);
    return () => {
      const at = this.hooks?.indexOf(fn) ?? -1;
      if (at >= 0) this.hooks!.splice(at, 1);
    };
  }
}

const noop = (): void => undefined;

/**
 * Calls `fn` when `signal` aborts (at once if it has), until the returned function is
 * called: how an implementation destroys the connection of a statement past its deadline.
 * No signal (no deadline): nothing to watch.
 */
export function onDeadline(signal: DeadlineSignal | undefined, fn: () => void): () => void {
  return signal ? signal.watch(fn) : noop;
}
