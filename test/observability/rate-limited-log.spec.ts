import type { LoggerService } from '@nestjs/common';
import { LOG_WINDOW_MS, RateLimitedLog } from '../../lib/observability/rate-limited-log.js';

describe('RateLimitedLog (how a repeating failure reaches the log: the module log and the TypeORM purge)', () => {
  function setup() {
    const lines: string[] = [];
    const logger = {
      warn: (line: string) => void lines.push(line),
      error: (line: string) => void lines.push(`error: ${line}`),
    } as unknown as LoggerService;
    let now = 1_000_000;
    const log = new RateLimitedLog(logger, LOG_WINDOW_MS, () => now);
    return { lines, log, advance: (ms: number) => void (now += ms) };
  }

  it('writes one line per cause per 10 s, then says how many it held back', () => {
    const { lines, log, advance } = setup();
    expect(log.warn('relation missing', 'first')).toBe(true);
    advance(1);
    expect(log.warn('relation missing', 'second')).toBe(false);
    advance(LOG_WINDOW_MS - 2);
    expect(log.warn('relation missing', 'third')).toBe(false);
    expect(lines).toEqual(['first']);
    advance(1);
    expect(log.warn('relation missing', 'fourth')).toBe(true);
    expect(lines).toEqual(['first', 'fourth (2 more like it since the last line)']);
  });

  it('keeps causes apart', () => {
    const { lines, log } = setup();
    log.warn('a', 'line a');
    log.warn('b', 'line b');
    log.warn('a', 'line a again');
    expect(lines).toEqual(['line a', 'line b']);
  });

  it('rate-limits error lines the same way, at error level', () => {
    const { lines, log, advance } = setup();
    expect(log.error('bad config', 'first')).toBe(true);
    expect(log.error('bad config', 'second')).toBe(false);
    advance(LOG_WINDOW_MS);
    expect(log.error('bad config', 'third')).toBe(true);
    expect(lines).toEqual(['error: first', 'error: third (1 more like it since the last line)']);
  });
});
