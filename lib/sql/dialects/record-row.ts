import { IdempotencyFingerprintMismatchError } from '../../core/errors.js';
import { serializeOutcome } from '../../core/outcome.js';
import type { IdempotencyRecord } from '../../core/record.js';
import type { TransactionalRequest } from '../../core/store.js';
import type { Acquisition, ClaimAnswer } from '../dialect.js';
import type { SqlResult } from '../statement.js';

/** What a result that can never be stored is stored as instead: duplicates then get a not-replayable error. */
export function unstorableResult(reason: string): string {
  return serializeOutcome({ kind: 'unstorable', reason });
}

const LOST_RESULT = unstorableResult('the stored response was lost from the records table (its result column is empty)');

/**
 * The stored result of a completed row. One without a result lost it (TypeORM's schema
 * sync drops and re-adds a column whose type changed, e.g. the 0.4 entity's TEXT result):
 * it replays as not storable, never as a reason to run the handler again.
 */
export function completedResultOf(value: unknown): string {
  return value === null || value === undefined ? LOST_RESULT : String(value);
}

/** The record a row of the table stands for. */
export function toRecord(key: string, row: Record<string, unknown>): IdempotencyRecord {
  const fingerprint = row.fingerprint === null || row.fingerprint === undefined ? undefined : String(row.fingerprint);
  if (row.status === 'completed') {
    return { status: 'completed', key, result: completedResultOf(row.result), expiresAt: Number(row.expires_at), fingerprint };
  }
  return { status: 'in_progress', key, leaseToken: String(row.lease_token), leaseExpiresAt: Number(row.lease_expires_at), fingerprint };
}

/**
 * A boolean the statement computed (`claimed`, `dead`): PostgreSQL answers `true`, MySQL,
 * MariaDB and SQLite answer `1`.
 */
export function isFlagSet(value: unknown): boolean {
  return value === true || Number(value) === 1;
}

/**
 * The answer of a claim whose statement returns the row with a `claimed` flag (PostgreSQL,
 * SQLite). No row: `none` (PostgreSQL: look again; SQLite: read the live row).
 */
export function flaggedClaimAnswer(key: string, result: SqlResult, none: 'read' | 'again'): ClaimAnswer {
  const { rows } = result;
  if (rows.length === 0) return none;
  const row = rows[0];
  return isFlagSet(row.claimed)
    ? { claimed: true, record: toRecord(key, row) as Extract<IdempotencyRecord, { status: 'in_progress' }> }
    : { claimed: false, record: toRecord(key, row) };
}

/**
 * The transaction's acquisition met a live row it does not own: a fingerprint mismatch, a
 * completed record (replay) or a lease of the regular claim path (in flight).
 */
export function liveRowAcquisition(row: Record<string, unknown>, request: TransactionalRequest): Acquisition {
  const storedFingerprint = row.fingerprint ?? undefined;
  if (request.fingerprint !== undefined && storedFingerprint !== undefined && storedFingerprint !== request.fingerprint) {
    throw new IdempotencyFingerprintMismatchError();
  }
  if (row.status === 'completed') return { kind: 'replay', result: completedResultOf(row.result) };
  return { kind: 'in_flight', retryAfterMs: Math.max(1_000, Number(row.lease_expires_at) - Date.now()) };
}
