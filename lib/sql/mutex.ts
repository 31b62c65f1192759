/**
 * FIFO mutual exclusion. SQLite drivers run every query on ONE connection, so two
 * transactions interleaved on it would nest into each other; the store serializes its
 * own work on a SQLite DataSource through one of these.
 */
export class Mutex {
  private held = false;
  private readonly waiters: Array<() => void> = [];

  /** Resolves with the release function; rejects after `timeoutMs` when given. */
  acquire(timeoutMs?: number): Promise<() => void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const grant = () => {
        if (timer) clearTimeout(timer);
        resolve(this.releaser());
      };
      this.waiters.push(grant);
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          const index = this.waiters.indexOf(grant);
          if (index >= 0) this.waiters.splice(index, 1);
          reject(new MutexTimeoutError());
        }, timeoutMs);
      }
    });
  }

  async run<T>(fn: () => Promise<T>, timeoutMs?: number): Promise<T> {
    const release = await this.acquire(timeoutMs);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiters.shift();
      if (next) next();
      else this.held = false;
    };
  }
}

export class MutexTimeoutError extends Error {
  constructor() {
    super('Timed out waiting for the SQLite connection.');
    this.name = 'MutexTimeoutError';
  }
}

// Global, so that the ESM and CommonJS copies of this package (both may load in one
// process) share one mutex per connection, whichever copy asks.
const sqliteMutexes = ((globalThis as Record<symbol, unknown>)[Symbol.for('nestjs-idempotency:typeorm:sqlite-mutexes')] ??= new WeakMap<
  object,
  Mutex
>()) as WeakMap<object, Mutex>;

/** @internal The one mutex guarding this library's work on a single-connection database (its DataSource). */
export function sqliteMutexOf(identity: object): Mutex {
  let mutex = sqliteMutexes.get(identity);
  if (!mutex) sqliteMutexes.set(identity, (mutex = new Mutex()));
  return mutex;
}
