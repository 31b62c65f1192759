import type { LoggerService } from '@nestjs/common';

/** One line per cause per window, in ms ("one line per cause per 10 s"). */
export const LOG_WINDOW_MS = 10_000;
/** Causes remembered; past it the oldest is forgotten, so a backend that words every failure differently cannot grow the map. */
const MAX_CAUSES = 1_000;

/**
 * Writes a line at most once per cause per `windowMs`, so a failure that repeats on every
 * request or purge cannot flood the log; the next line says how many were held back.
 * Shared by the module's default log and the TypeORM store's purge job.
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
    return this.write('warn', cause, line);
  }

  /** Returns whether the line was written. */
  error(cause: string, line: string): boolean {
    return this.write('error', cause, line);
  }

  private write(level: 'warn' | 'error', cause: string, line: string): boolean {
    const now = this.now();
    const last = this.lastLine.get(cause);
    if (last && now - last.at < this.windowMs) {
      last.held++;
      return false;
    }
    const held = last?.held ?? 0;
    if (!last && this.lastLine.size >= MAX_CAUSES) this.lastLine.delete(this.lastLine.keys().next().value!);
    // Deleted and set again, so the map's insertion order stays the order of last writes.
    this.lastLine.delete(cause);
    this.lastLine.set(cause, { at: now, held: 0 });
    const text = held > 0 ? `${line} (${held} more like it since the last line)` : line;
    if (level === 'error') this.logger.error(text);
    else this.logger.warn(text);
    return true;
  }
}
