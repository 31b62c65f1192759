import { IdempotencyInFlightError } from '../../core/errors.js';
import type { SqlDialect } from '../dialect.js';
import { MutexTimeoutError, sqliteMutexOf } from '../mutex.js';
import { acquireByInsert, type InsertAcquireStatements } from './insert-acquire.js';
import { flaggedClaimAnswer } from './record-row.js';
import { probeSql, quotedRecordsTableDdl, RECORD_COLUMNS, type TableName } from './records-table.js';

/**
 * SQLite (sql.js, better-sqlite3, sqlite3 and the other single-connection drivers). It is
 * embedded in one process, so the app clock is the database clock and is passed as a
 * parameter; the store's work on the one connection is serialized by a mutex.
 */
export function sqliteDialect(table: TableName, clock: () => number = Date.now): SqlDialect {
  const t = table.quoted;
  const statements: InsertAcquireStatements = {
    claim: (key, token, leaseTtl, fingerprint) => {
      const now = clock();
      // SQLite returns nothing when the conditional update does not fire; the store
      // then reads the live row (sql.js runs one statement at a time, so no lock is needed).
      return {
        name: undefined,
        sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
VALUES (?, 'in_progress', ?, ?, ?, NULL, ?, ?)
ON CONFLICT ("key") DO UPDATE SET
  "status" = 'in_progress', "lease_token" = excluded."lease_token", "lease_expires_at" = excluded."lease_expires_at",
  "fingerprint" = excluded."fingerprint", "result" = NULL, "expires_at" = excluded."expires_at", "created_at" = excluded."created_at"
WHERE "expires_at" <= excluded."created_at"
RETURNING ${RECORD_COLUMNS}, 1 AS claimed`,
        params: [key, token, now + leaseTtl, fingerprint ?? null, now + leaseTtl, now],
      };
    },
    read: (key) => ({
      name: undefined,
      sql: `SELECT ${RECORD_COLUMNS} FROM ${t} WHERE "key" = ? AND "expires_at" > ?`,
      params: [key, clock()],
    }),
    complete: (key, token, result, ttl) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [result, now + ttl, key, token, now],
      };
    },
    release: (key, token) => ({
      name: undefined,
      sql: `DELETE FROM ${t} WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress'`,
      params: [key, token],
    }),
    renew: (key, token, leaseTtl) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "lease_expires_at" = ?, "expires_at" = ?
WHERE "key" = ? AND "lease_token" = ? AND "status" = 'in_progress' AND "lease_expires_at" > ?`,
        params: [now + leaseTtl, now + leaseTtl, key, token, now],
      };
    },
    delete: (key) => ({ name: undefined, sql: `DELETE FROM ${t} WHERE "key" = ?`, params: [key] }),
    insertIfAbsent: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        name: undefined,
        sql: `INSERT INTO ${t} ("key", "status", "lease_token", "lease_expires_at", "fingerprint", "result", "expires_at", "created_at")
VALUES (?, 'in_progress', ?, ?, ?, NULL, ?, ?)
ON CONFLICT ("key") DO NOTHING
RETURNING "key"`,
        params: [key, token, now + ttl, fingerprint ?? null, now + ttl, now],
      };
    },
    readAny: (key) => ({
      name: undefined,
      sql: `SELECT ${RECORD_COLUMNS}, ("expires_at" <= ?) AS dead FROM ${t} WHERE "key" = ?`,
      params: [clock(), key],
    }),
    takeOver: (key, token, ttl, fingerprint) => {
      const now = clock();
      return {
        name: undefined,
        sql: `UPDATE ${t} SET "status" = 'in_progress', "lease_token" = ?, "lease_expires_at" = ?, "fingerprint" = ?,
  "result" = NULL, "expires_at" = ?, "created_at" = ?
WHERE "key" = ? AND "expires_at" <= ?
RETURNING "key"`,
        params: [token, now + ttl, fingerprint ?? null, now + ttl, now, key, now],
      };
    },
    finish: (key, result, ttl) => ({
      name: undefined,
      sql: `UPDATE ${t} SET "status" = 'completed', "result" = ?, "expires_at" = ?, "lease_token" = NULL, "lease_expires_at" = NULL WHERE "key" = ?`,
      params: [result, clock() + ttl, key],
    }),
    purgeBatch: (limit) => ({
      name: undefined,
      sql: `DELETE FROM ${t} WHERE "key" IN (SELECT "key" FROM ${t} WHERE "expires_at" <= ? ORDER BY "expires_at" LIMIT ?)`,
      params: [clock(), limit],
    }),
    probe: () => ({ name: undefined, sql: probeSql(t), params: [] }),
  };
  return {
    ...statements,
    name: 'sqlite',
    table,
    createTable: () => quotedRecordsTableDdl(table),
    // The claim and the read after it on the one connection, under the mutex.
    claimSession: (db, claim) => db.withConnection((connection) => claim((statement) => connection.run(statement))),
    claimAnswer: (key, _request, result) => flaggedClaimAnswer(key, result, 'read'),
    claimMayRetry: () => false,
    // One process: no lock; each batch goes through the mutex on its own, so claims interleave.
    withPurgeLock: async (_db, purge) => ({ ran: true, deleted: await purge(undefined) }),
    serializeTransactions: async (db, waitTimeout, open) => {
      try {
        return await sqliteMutexOf(db.identity).run(open, waitTimeout);
      } catch (error) {
        if (error instanceof MutexTimeoutError) throw new IdempotencyInFlightError(waitTimeout ?? 1_000);
        throw error;
      }
    },
    // Always serializable.
    isolationOf: () => undefined,
    acquire: (step) => acquireByInsert(statements, (_step, fn) => fn(), step),
  };
}
