import { onDeadline } from '../../sql/deadline-signal.js';
import type { DataSource, QueryRunner } from 'typeorm';
import type { ConnectionDeadline } from '../../sql/port.js';
import { discardRunnerConnection } from './connection-discard.js';
import { createGuardedQueryRunner } from './pg-client-guard.js';

/**
 * Runs `fn` on a pooled connection of its own, held from the first statement to the last (a
 * session-level advisory lock's holder, an idempotent transaction). Past `deadline`, the
 * connection is destroyed: the runner's release then cannot return it to the pool.
 */
export async function withOwnConnection<T>(
  dataSource: DataSource,
  fn: (runner: QueryRunner) => Promise<T>,
  deadline?: ConnectionDeadline,
): Promise<T> {
  const runner = createGuardedQueryRunner(dataSource);
  const stopWatching = onDeadline(deadline?.signal, () => discardRunnerConnection(dataSource, runner));
  try {
    // A connection that comes after the deadline is healthy, only late: the caller's fn
    // refuses to start on it, and it goes back to the pool.
    await runner.connect();
    return await fn(runner);
  } finally {
    stopWatching();
    await runner.release();
  }
}
