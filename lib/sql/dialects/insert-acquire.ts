import { randomUUID } from 'node:crypto';
import { isFlagSet, liveRowAcquisition } from './record-row.js';
import { MAX_ACQUIRE_ROUNDS, type AcquireStep, type Acquisition, type RecordStatements } from '../dialect.js';
import type { Statement } from '../statement.js';

/** The statements of an acquisition by insert (PostgreSQL, SQLite). */
export interface InsertAcquireStatements extends RecordStatements {
  /** Inserts a lease row, or nothing when the key exists (waits for an uncommitted duplicate). */
  insertIfAbsent(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
  /** Takes a dead row over (locks it until commit). */
  takeOver(key: string, token: string, ttl: number, fingerprint: string | undefined): Statement;
}

/**
 * Runs one record statement of the acquisition; `'restart'` when the transaction must
 * start again (PostgreSQL: a serialization failure under a stricter isolation level).
 */
export type GuardStatement = <R>(step: AcquireStep, fn: () => Promise<R>) => Promise<R | 'restart'>;

/**
 * PostgreSQL and SQLite: inserts the lease row first. `ON CONFLICT DO NOTHING` makes a
 * concurrent duplicate wait on the unique index until the first transaction ends: then it
 * either inserts (the first rolled back) or sees the committed record.
 */
export async function acquireByInsert(sql: InsertAcquireStatements, guard: GuardStatement, step: AcquireStep): Promise<Acquisition> {
  const { connection, request } = step;
  const token = randomUUID();
  for (let round = 0; round < MAX_ACQUIRE_ROUNDS; round++) {
    const inserted = await guard(step, () => connection.run(sql.insertIfAbsent(request.key, token, request.ttl, request.fingerprint)));
    if (inserted === 'restart') return { kind: 'restart' };
    if (inserted.rows.length > 0) return { kind: 'owned' };
    const { rows } = await connection.run(sql.readAny(request.key));
    if (rows.length === 0) continue; // deleted in between: insert again
    const row = rows[0];
    if (isFlagSet(row.dead)) {
      // A dead lease or an expired result: take it over. The row lock makes concurrent
      // takers wait for this transaction and then find the row alive.
      const taken = await guard(step, () => connection.run(sql.takeOver(request.key, token, request.ttl, request.fingerprint)));
      if (taken === 'restart') return { kind: 'restart' };
      if (taken.rows.length > 0) return { kind: 'owned' };
      continue;
    }
    return liveRowAcquisition(row, request);
  }
  return { kind: 'restart' };
}
