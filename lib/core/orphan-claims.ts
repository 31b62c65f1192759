import type { IdempotencyStore } from './store.js';

/**
 * Most claims whose undo is still unconfirmed, per engine. Past it a failed claim is
 * simply left to its lease, so an outage cannot grow this list without bound.
 */
const MAX_ORPHAN_CLAIMS = 10_000;

/** First wait before an undoing release that failed is sent again, ms; it doubles up to the maximum. */
const RELEASE_RETRY_FIRST_MS = 50;
const RELEASE_RETRY_MAX_MS = 1_000;

/**
 * Claims that failed on the client side and whose undoing release did not get an
 * answer either (key -> token -> until when its lease can hold, epoch ms). Such a claim
 * may still be executed by the store later (a command still in a socket, or resent by
 * the client after a reconnection) and would lock the key for a lease nobody owns; when
 * a retry in this process meets one, it releases it and claims again.
 * Insertion order is roughly expiry order, so sweeping from the head stays cheap.
 */
export class OrphanClaims {
  private readonly claims = new Map<string, Map<string, number>>();
  private count = 0;

  /** Number of claims whose undo is unconfirmed. */
  get size(): number {
    return this.count;
  }

  /**
   * A claim failed on the client side (timeout, lost connection), so the store may
   * still execute it: a command waiting in a socket of a hung server runs when the
   * server resumes. The release is sent at once, on the same connection for a
   * single-connection client such as ioredis, so it runs right after that late claim
   * and the key is free as soon as the store answers again. A release that fails too
   * is sent again with a backoff while the lease lasts, so the key comes free soon after
   * the store does, even when the client's retry goes to another process, or another
   * body's request meets the claim. Checked against this claim's token, it can never
   * remove anyone else's lease.
   */
  undo(store: IdempotencyStore, key: string, token: string, leaseUntil: number): void {
    this.add(key, token, leaseUntil);
    this.sendRelease(store, key, token, leaseUntil, RELEASE_RETRY_FIRST_MS);
  }

  private sendRelease(store: IdempotencyStore, key: string, token: string, leaseUntil: number, nextDelay: number): void {
    let release: Promise<boolean>;
    try {
      release = store.release(key, token);
    } catch {
      return;
    }
    // Kept unless the release removed the lease: a `false` may only mean that the claim
    // has not reached the store yet (another pooled connection), and a rejection leaves
    // the outcome unknown again. A retry in this process then undoes it (`has`, `release`).
    release.then(
      (released) => released && this.remove(key, token),
      () => {
        // Past the lease, or undone meanwhile by a retry (`release`): nothing left to free.
        if (Date.now() + nextDelay >= leaseUntil || !this.claims.get(key)?.has(token)) return;
        const timer = setTimeout(
          () =>
            this.claims.get(key)?.has(token) &&
            this.sendRelease(store, key, token, leaseUntil, Math.min(nextDelay * 2, RELEASE_RETRY_MAX_MS)),
          nextDelay,
        );
        timer.unref();
      },
    );
  }

  /** Whether the lease `token` holds on `key` is one of these claims, still within its lease. */
  has(key: string, token: string): boolean {
    if (this.count === 0) return false;
    const until = this.claims.get(key)?.get(token);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.remove(key, token);
    return false;
  }

  /** Releases one of these claims met by a retry; true when the key is free again. Never throws. */
  async release(store: IdempotencyStore, key: string, token: string): Promise<boolean> {
    try {
      const released = await store.release(key, token);
      this.remove(key, token);
      return released;
    } catch {
      return false;
    }
  }

  private add(key: string, token: string, until: number): void {
    this.sweep(Date.now(), 2);
    if (this.count >= MAX_ORPHAN_CLAIMS) return;
    let tokens = this.claims.get(key);
    if (!tokens) this.claims.set(key, (tokens = new Map()));
    if (!tokens.has(token)) this.count++;
    tokens.set(token, until);
  }

  private remove(key: string, token: string): void {
    const tokens = this.claims.get(key);
    if (!tokens?.delete(token)) return;
    this.count--;
    if (tokens.size === 0) this.claims.delete(key);
  }

  /** Drops claims whose lease has run out anyway, a few per call from the oldest key. */
  private sweep(now: number, budget: number): void {
    for (const [key, tokens] of this.claims) {
      for (const [token, until] of tokens) {
        if (until > now || budget-- <= 0) return;
        this.remove(key, token);
      }
    }
  }
}
