/**
 * A trace of every store call of the fault apps (key, token, start, end, result or error),
 * for investigating a run by hand: `FAULT_TRACE=/path.jsonl` makes every app wrap its store.
 */
import { appendFileSync } from 'node:fs';
import type { IdempotencyStore } from '../../../lib/index.js';

export function traceFile(): string | undefined {
  return process.env.FAULT_TRACE || undefined;
}

export function trace(entry: Record<string, unknown>): void {
  const file = traceFile();
  if (file) appendFileSync(file, JSON.stringify(entry) + '\n');
}

const TRACED = new Set(['claim', 'complete', 'release', 'renew', 'get']);

export function tracedStore(app: string, store: IdempotencyStore): IdempotencyStore {
  if (!traceFile()) return store;
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof prop !== 'string' || !TRACED.has(prop) || typeof value !== 'function') return value;
      return (key: string, arg?: unknown, ...rest: unknown[]) => {
        const start = Date.now();
        const token = typeof arg === 'string' ? arg : (arg as { token?: string } | undefined)?.token;
        const p = (value as (...a: unknown[]) => Promise<unknown>).call(target, key, arg, ...rest);
        return p.then(
          (result) => {
            trace({ app, op: prop, key, token, start, end: Date.now(), result });
            return result;
          },
          (error: unknown) => {
            trace({ app, op: prop, key, token, start, end: Date.now(), error: String((error as Error)?.message ?? error) });
            throw error;
          },
        );
      };
    },
  });
}
