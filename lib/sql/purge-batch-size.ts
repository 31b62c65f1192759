/** No batch smaller than this (or `purgeBatchSize` when that is smaller): a purge must still make progress. */
const MIN_PURGE_BATCH = 10;

/** Longest a batch should take when no `statementTimeout` bounds it, ms. */
const DEFAULT_BATCH_TARGET_MS = 1_000;

/**
 * The size of the next purge batch: `purgeBatchSize` while batches are quick, halved after
 * one that took longer than its target (a fifth of `statementTimeout`, at most 1 s) or
 * failed, doubled back after quick ones (under a quarter of the target). Kept from one
 * purge to the next, so a purge that failed starts the next one smaller.
 *
 * Why: the cost of a batch is not its row count alone. On MariaDB beside 16 claimers and a
 * buffer pool smaller than the table, one batch of 1 000 took longer than the 5 s
 * `statementTimeout`, and the purge failed every time it ran.
 */
export class PurgeBatchSize {
  private size: number;
  private readonly min: number;
  readonly targetMs: number;

  constructor(
    private readonly max: number,
    statementTimeout: number | undefined,
  ) {
    this.size = max;
    this.min = Math.min(max, MIN_PURGE_BATCH);
    this.targetMs = statementTimeout
      ? Math.min(DEFAULT_BATCH_TARGET_MS, Math.max(1, Math.floor(statementTimeout / 5)))
      : DEFAULT_BATCH_TARGET_MS;
  }

  /** Rows the next batch may delete. */
  get current(): number {
    return this.size;
  }

  /** A batch of `current` rows finished in `durationMs`. */
  finished(durationMs: number): void {
    if (durationMs > this.targetMs) this.shrink();
    else if (durationMs < this.targetMs / 4) this.size = Math.min(this.max, this.size * 2);
  }

  /** A batch failed (a deadline, a lock wait, a lost connection): the next one is smaller. */
  failed(): void {
    this.shrink();
  }

  private shrink(): void {
    this.size = Math.max(this.min, Math.floor(this.size / 2));
  }
}
