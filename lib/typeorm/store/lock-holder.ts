import type { DataSource, QueryRunner } from 'typeorm';
import { createGuardedQueryRunner } from './pg-client-guard.js';

/** Runs `fn` on a pooled connection of its own, held from the first statement to the last (a session-level advisory lock's holder, an idempotent transaction). */
export async function withOwnConnection<T>(dataSource: DataSource, fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  const runner = createGuardedQueryRunner(dataSource);
  try {
    await runner.connect();
    return await fn(runner);
  } finally {
    await runner.release();
  }
}
