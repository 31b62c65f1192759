import { randomUUID } from 'node:crypto';

/**
 * The key of a new logical call: a UUID v4, made once before its first attempt.
 */
export function callKey(): string {
  return randomUUID();
}
