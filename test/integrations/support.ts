import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';

export const REDIS_HOST = process.env.REDIS_HOST ?? '127.0.0.1';
export const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379);

/** A prefix of this run alone, for Redis keys, BullMQ queues and idempotency records. */
export function runPrefix(what: string): string {
  return `it:${what}:${process.pid}:${randomUUID().slice(0, 8)}`;
}

export function redisClient(): Redis {
  return new Redis({ host: REDIS_HOST, port: REDIS_PORT, maxRetriesPerRequest: null });
}

/** Deletes every key under `prefix` (SCAN, never KEYS). */
export async function deleteKeys(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== '0');
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `condition` until it holds; fails with `what` past the deadline. */
export async function until(what: string, condition: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await pause(10);
  }
}

/** A gate a test opens when it decides: handlers await `passed` to hold their effect in a window. */
export class Gate {
  private release!: () => void;
  readonly passed = new Promise<void>((resolve) => (this.release = resolve));
  open(): void {
    this.release();
  }
}
