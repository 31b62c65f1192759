import type { LoggerService } from '@nestjs/common';

/** A Nest logger that keeps each line as `level context message`, for assertions on what was logged. */
export function captureLogger(lines: string[]): LoggerService {
  const keep =
    (level: string) =>
    (message: unknown, ...rest: unknown[]) =>
      lines.push(`${level} ${String(rest[rest.length - 1])} ${String(message)}`);
  return { log: keep('log'), error: keep('error'), warn: keep('warn'), debug: keep('debug'), verbose: keep('verbose') };
}
