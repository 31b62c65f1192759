import type { LoggerService } from '@nestjs/common';

/** One line per cause per window, in ms (issue 13: "one line per cause per 10 s"). */
export const LOG_WINDOW_MS = 10_000;

/**
 * Writes a warning at most once per cause per `windowMs`, so a failure that repeats on
 * every purge interval cannot flood the log; the next line says how many were held back.
 * @internal
 */
export class RateLimitedLog {
  private readonly lastLine = new Map<string, { at: number; held: number }>();

  constructor(
    private readonly logger: LoggerService,
    private readonly windowMs: number = LOG_WINDOW_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Returns whether the line was written. */
  warn(cause: string, line: string): boolean {
    const now = this.now();
    const last = this.lastLine.get(cause);
    if (last && now - last.at < this.windowMs) {
      last.held++;
      return false;
    }
    const held = last?.held ?? 0;
    // Causes are error messages, so the map stays as small as the set of distinct failures
    // seen; still, a database that words every failure differently must not grow it unbounded.
    if (!last && this.lastLine.size >= 100) this.lastLine.clear();
    this.lastLine.set(cause, { at: now, held: 0 });
    this.logger.warn(held > 0 ? `${line} (${held} more like it since the last line)` : line);
    return true;
  }
}
