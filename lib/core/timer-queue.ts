/** An item of a `TimerQueue`: when it falls due, `performance.now()` ms, set by the queue. */
export interface TimerQueueItem {
  dueAt: number;
}

/**
 * Items that fall due a fixed `delay` after they join, on one timer: the lease renewals
 * of an engine (one queue per renewal interval, `repeat`) and the deadlines of a Redis
 * script runner's calls (one-shot). As every item of a queue waits the same delay, items
 * fall due in the order they joined, and a Set (which iterates in insertion order) holds
 * them next due first. A timer per item cost every request a timer created and cleared;
 * here an item costs an entry in the Set, and the one timer is armed for the head only.
 *
 * Times are monotonic (`performance.now()`, as timers use): a wall clock set back would
 * hold items past their due time.
 *
 * Not part of the public API.
 */
export class TimerQueue<T extends TimerQueueItem> {
  private readonly items = new Set<T>();
  private timer: NodeJS.Timeout | undefined;

  /**
   * @param delay how long after joining an item falls due, ms.
   * @param onDue called for each item due, after the queue has moved past it.
   * @param repeat a due item stays, due again one `delay` later (behind the items not yet
   *   due, so the order stays the due order); otherwise it leaves the queue.
   */
  constructor(
    readonly delay: number,
    private readonly onDue: (item: T) => void,
    private readonly repeat = false,
  ) {}

  get size(): number {
    return this.items.size;
  }

  /** Adds `item`, due `delay` ms from now. */
  add(item: T): void {
    item.dueAt = performance.now() + this.delay;
    this.items.add(item);
    if (!this.timer) this.arm(this.delay);
  }

  /**
   * Keeps `item` in the queue until `work` settles, then hands its outcome to `resolve` /
   * `reject`: the one-shot deadline of a call, whose `onDue` rejects the call through the
   * item first (a promise settles once, so `work`'s late outcome then goes nowhere).
   */
  watch<R>(item: T, work: Promise<R>, resolve: (value: R) => void, reject: (error: unknown) => void): void {
    this.add(item);
    work.then(
      (value) => {
        this.delete(item);
        resolve(value);
      },
      (error: unknown) => {
        this.delete(item);
        reject(error);
      },
    );
  }

  delete(item: T): void {
    // While other items wait, the timer stays armed (when it fires with nothing due, it
    // re-arms for the head); the last one out stops it, so no timer outlives the work.
    if (this.items.delete(item) && this.items.size === 0 && this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private arm(delay: number): void {
    this.timer = setTimeout(this.fire, delay);
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    const now = performance.now();
    const due: T[] = [];
    for (const item of this.items) {
      if (item.dueAt > now) break;
      due.push(item);
    }
    for (const item of due) {
      this.items.delete(item);
      if (!this.repeat) continue;
      item.dueAt += this.delay;
      if (item.dueAt <= now) item.dueAt = now + this.delay;
      this.items.add(item);
    }
    const next = this.items.values().next();
    if (!next.done) this.arm(next.value.dueAt - now);
    for (const item of due) this.onDue(item);
  };
}
