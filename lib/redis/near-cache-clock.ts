import type { NearCacheClient } from './near-cache-connection.js';

/** Served no later than this before the record's expiry in Redis, ms, on top of the clock uncertainty. */
const EXPIRY_MARGIN_MS = 100;
/** Extra margin per ms since the clocks were compared: 1 ms per s (1000 ppm, far above real drift). */
const DRIFT_ALLOWANCE = 0.001;

/**
 * The Redis server's clock as seen from this process, from `TIME`: records expire on the
 * Redis clock (epoch ms), near cache entries on `performance.now()`. Measured when
 * tracking starts, then every few minutes, so the drift allowance stays small.
 */
export class NearCacheClock {
  /** Redis epoch ms minus `performance.now()`, and how far off it may be. */
  private offset = 0;
  private uncertainty = 0;
  private measuredAt = 0;

  constructor(
    private readonly client: NearCacheClient,
    private readonly timeout: number,
  ) {}

  /**
   * Until when a record that expires at `expiresAt` (Redis epoch ms) may be answered, in
   * `performance.now()` ms: earlier by the clock's uncertainty, a margin and the drift
   * allowed since the clocks were compared.
   */
  localExpiry(expiresAt: number, now: number): number {
    return expiresAt - this.offset - this.uncertainty - EXPIRY_MARGIN_MS - Math.max(0, now - this.measuredAt) * DRIFT_ALLOWANCE;
  }

  /** Sets the clock from a `TIME` reply sent at `before` and received at `after` (`performance.now()` ms). */
  set(time: unknown[], before: number, after: number): void {
    const redisNow = Number(String(time[0])) * 1_000 + Math.floor(Number(String(time[1])) / 1_000);
    this.offset = redisNow - (before + after) / 2;
    this.uncertainty = (after - before) / 2 + 1;
    this.measuredAt = after;
  }

  /**
   * `TIME` through the user's client (the tracking connection, subscribed over RESP2,
   * cannot send it): a new offset and measurement time, or nothing if it fails, answers
   * late, or `current()` says the answer no longer applies (the drift allowance keeps
   * growing meanwhile, which only shortens deadlines).
   */
  async compare(current: () => boolean): Promise<void> {
    try {
      const before = performance.now();
      const time = (await this.client.eval(`return redis.call('TIME')`, 0)) as unknown[];
      const after = performance.now();
      if (!current() || after - before > this.timeout) return;
      this.set(time, before, after);
    } catch {
      // The next comparison, or the next connection, measures again.
    }
  }
}
