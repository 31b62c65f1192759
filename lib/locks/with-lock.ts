import { checkWholeNumber } from '../core/options.js';
import { LockLostError, LockNotAcquiredError } from './lock.errors.js';
import type { LockHandle, LockProvider } from './lock-provider.js';

/** Options of `withLock`. */
export interface WithLockOptions {
  /**
   * How long the lock lasts, ms. While the work runs it is renewed every third of it,
   * so this only bounds how long a crashed holder blocks the resource.
   * @default 10000
   */
  ttl?: number;
  /**
   * Longest wait for a busy lock, ms, before `LockNotAcquiredError`; 0 makes a single
   * attempt.
   * @default 5000
   */
  waitTimeout?: number;
  /** Pause between two attempts, ms; up to as much again is added at random, so waiters do not retry in step. @default 50 */
  retryDelay?: number;
  /** Renew the lock while the work runs. @default true */
  autoRenew?: boolean;
}

export const DEFAULT_LOCK_TTL = 10_000;
export const DEFAULT_LOCK_WAIT_TIMEOUT = 5_000;
export const DEFAULT_LOCK_RETRY_DELAY = 50;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `work` while holding the lock on `resource`, then releases it (only if still
 * held by this call: another holder's lock is never removed).
 *
 * - Waits up to `waitTimeout` for a busy lock, then throws `LockNotAcquiredError`
 *   (code `IDEMPOTENCY_LOCK_NOT_ACQUIRED`) without running `work`.
 * - Renews the lock every `ttl / 3` while `work` runs. If the lock is lost anyway (the
 *   store was unreachable past the expiry, the process stalled), `signal` is aborted
 *   with `LockLostError`: check it before every write that needs exclusivity.
 * - Errors of the store (Redis down) reject as they are; errors of `work` are rethrown
 *   after the release.
 *
 * @example
 * await withLock(locks, `inventory:${sku}`, async (signal) => {
 *   const stock = await readStock(sku);
 *   signal.throwIfAborted();
 *   if (stock > 0) await writeStock(sku, stock - 1);
 * }, { ttl: 5_000, waitTimeout: 2_000 });
 */
export async function withLock<T>(
  provider: LockProvider,
  resource: string,
  work: (signal: AbortSignal) => Promise<T> | T,
  options: WithLockOptions = {},
): Promise<T> {
  const ttl = options.ttl ?? DEFAULT_LOCK_TTL;
  const waitTimeout = options.waitTimeout ?? DEFAULT_LOCK_WAIT_TIMEOUT;
  const retryDelay = options.retryDelay ?? DEFAULT_LOCK_RETRY_DELAY;
  checkWholeNumber('withLock', 'ttl', ttl, { unit: 'ms', example: '10_000' });
  checkWholeNumber('withLock', 'waitTimeout', waitTimeout, { unit: 'ms', min: 0, example: '5_000' });
  checkWholeNumber('withLock', 'retryDelay', retryDelay, { unit: 'ms', example: '50' });

  const handle = await acquireWithin(provider, resource, ttl, waitTimeout, retryDelay);
  const controller = new AbortController();
  const renewal = options.autoRenew === false ? undefined : new Renewal(handle, ttl, controller);
  try {
    return await work(controller.signal);
  } finally {
    renewal?.stop();
    // A failed release leaves the lock to lapse at its ttl; the work's outcome stands.
    await handle.release().catch(() => false);
  }
}

async function acquireWithin(
  provider: LockProvider,
  resource: string,
  ttl: number,
  waitTimeout: number,
  retryDelay: number,
): Promise<LockHandle> {
  const deadline = Date.now() + waitTimeout;
  for (;;) {
    const handle = await provider.acquire(resource, { ttl });
    if (handle) return handle;
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new LockNotAcquiredError(resource, waitTimeout);
    await sleep(Math.min(remaining, retryDelay + Math.random() * retryDelay));
  }
}

/** Extends the lock every third of its ttl; aborts the work's signal once it is lost. */
class Renewal {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly handle: LockHandle,
    private readonly ttl: number,
    private readonly controller: AbortController,
  ) {
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.renew(), Math.max(1, Math.floor(this.ttl / 3)));
    this.timer.unref();
  }

  private async renew(): Promise<void> {
    let held: boolean;
    try {
      held = await this.handle.extend(this.ttl);
    } catch {
      // A transient store error: the lock still holds until its expiry, so try again.
      held = Date.now() < this.handle.expiresAt;
    }
    if (this.stopped) return;
    if (!held) {
      this.stopped = true;
      this.controller.abort(new LockLostError(this.handle.resource));
      return;
    }
    this.schedule();
  }
}
