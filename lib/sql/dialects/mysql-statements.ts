import { expiryIndexNameOf, type TableName } from './records-table.js';
import type { RecordStatements } from '../dialect.js';
import type { SqlResult, Statement } from '../statement.js';

/**
 * The record statements on MySQL 8 and MariaDB 10.11+ (TypeORM's `mysql` and `mariadb`
 * drivers, through mysql2). Every statement is accepted by both servers; the one that
 * differs is the claim, which on MariaDB (10.5+) ends with `RETURNING` and so answers a
 * duplicate in the same round trip. `claimReturningOf` (mysql-server.ts) decides which, in one place.
 *
 * The clock is the server's: `UTC_TIMESTAMP(6)` is fixed at the start of each statement
 * (as `NOW()` is), so every mention of it in one statement is the same instant, and it is
 * UTC whatever the session's `time_zone` (UNIX_TIMESTAMP(NOW()) would not be, around a
 * DST change).
 */
export const MYSQL_NOW = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`;

const COLUMNS = '`status`, `lease_token`, `lease_expires_at`, `fingerprint`, `result`, `expires_at`';
const INSERT_COLUMNS = '(`key`, `status`, `lease_token`, `lease_expires_at`, `fingerprint`, `result`, `expires_at`, `created_at`)';
const DEAD = `\`expires_at\` <= ${MYSQL_NOW}`;

/** `db`.`table` or `table`, backtick-quoted (the name was validated as a plain identifier). */
export function mysqlQuoted(name: TableName): string {
  return (name.schema ? `\`${name.schema}\`.` : '') + `\`${name.table}\``;
}

/** The MySQL family's statements: the record statements, and MariaDB's take-over of a dead row. */
export interface MysqlStatements extends RecordStatements {
  /**
   * MariaDB's second claim statement, run only when its claim found the row dead: takes it
   * over while it is still dead (`Rows matched` 0 when another claimer took it first), and
   * marks the take-over with the server clock it used in the insert id, as MySQL 8's claim does.
   */
  takeOver(key: string, token: string, leaseTtl: number, fingerprint: string | undefined): Statement;
}

/**
 * The statements on a table. `returning`: the server accepts `INSERT ... RETURNING`
 * (MariaDB 10.5+), so the claim returns the row it leaves behind, whoever owns it.
 */
export function mysqlStatements(table: TableName, returning: boolean): MysqlStatements {
  const t = table.quoted;
  const values = `VALUES (?, 'in_progress', ?, ${MYSQL_NOW} + ?, ?, NULL, ${MYSQL_NOW} + ?, LAST_INSERT_ID(${MYSQL_NOW}))`;
  // MariaDB: inserts, or leaves the row it finds as it is and returns it with `dead`, its
  // state by the statement's clock; a dead row (expired, not yet purged) is then taken over
  // by `takeOver`. Taking it over in this statement, as MySQL 8's below does, costs the server
  // seven conditional assignments on every duplicate, a replay's claim included (6 593-7 213
  // replay claims a second that way, 9 548-10 086 this way: docs/performance.md, "What we
  // learned"). The primary key's row lock orders concurrent claimers as below.
  const returningClaim = `INSERT INTO ${t} ${INSERT_COLUMNS}
${values}
ON DUPLICATE KEY UPDATE \`key\` = \`key\`
RETURNING ${COLUMNS}, (${DEAD}) AS \`dead\``;
  // MySQL 8 (no RETURNING): one statement, whatever happens: the primary key makes concurrent
  // claimers of one key queue on its row lock, and ON DUPLICATE KEY UPDATE reads the latest
  // committed row (a locking read, not the REPEATABLE READ snapshot), so exactly one of them
  // inserts or takes a dead row over; the others leave the live row unchanged (no write, so
  // a replay costs no redo). Assignments run left to right and later ones see earlier
  // results, so `expires_at`, which every condition reads, is assigned last.
  //
  // LAST_INSERT_ID(now) marks a claim in the OK packet's insert id, which MySQL 8 needs: the
  // VALUES list sets it, the live-row branch resets it to 0. Affected rows cannot tell: with
  // mysql2's default CLIENT_FOUND_ROWS a fresh insert and an unchanged duplicate both report 1.
  const insertIdClaim = `INSERT INTO ${t} ${INSERT_COLUMNS}
${values}
ON DUPLICATE KEY UPDATE
  \`status\` = IF(${DEAD}, 'in_progress', \`status\`),
  \`lease_token\` = IF(${DEAD}, ?, \`lease_token\`),
  \`lease_expires_at\` = IF(${DEAD}, ${MYSQL_NOW} + ?, \`lease_expires_at\`),
  \`fingerprint\` = IF(${DEAD}, ?, \`fingerprint\`),
  \`result\` = IF(${DEAD}, NULL, \`result\`),
  \`created_at\` = IF(${DEAD}, LAST_INSERT_ID(${MYSQL_NOW}), \`created_at\` + LAST_INSERT_ID(0)),
  \`expires_at\` = IF(${DEAD}, ${MYSQL_NOW} + ?, \`expires_at\`)`;
  const takeOver = `UPDATE ${t} SET \`status\` = 'in_progress', \`lease_token\` = ?, \`lease_expires_at\` = ${MYSQL_NOW} + ?, \`fingerprint\` = ?,
  \`result\` = NULL, \`created_at\` = LAST_INSERT_ID(${MYSQL_NOW}), \`expires_at\` = ${MYSQL_NOW} + ?
WHERE \`key\` = ? AND ${DEAD}`;
  const stmt = (sql: string, params: unknown[]): Statement => ({ sql, params, name: undefined });
  return {
    claim: returning
      ? (key, token, leaseTtl, fingerprint) => stmt(returningClaim, [key, token, leaseTtl, fingerprint ?? null, leaseTtl])
      : (key, token, leaseTtl, fingerprint) =>
          stmt(insertIdClaim, [key, token, leaseTtl, fingerprint ?? null, leaseTtl, token, leaseTtl, fingerprint ?? null, leaseTtl]),
    takeOver: (key, token, leaseTtl, fingerprint) => stmt(takeOver, [token, leaseTtl, fingerprint ?? null, leaseTtl, key]),
    read: (key) => stmt(`SELECT ${COLUMNS} FROM ${t} WHERE \`key\` = ? AND \`expires_at\` > ${MYSQL_NOW}`, [key]),
    complete: (key, token, result, ttl) =>
      stmt(
        `UPDATE ${t} SET \`status\` = 'completed', \`result\` = ?, \`expires_at\` = ${MYSQL_NOW} + ?, \`lease_token\` = NULL, \`lease_expires_at\` = NULL
WHERE \`key\` = ? AND \`lease_token\` = ? AND \`status\` = 'in_progress' AND \`lease_expires_at\` > ${MYSQL_NOW}`,
        [result, ttl, key, token],
      ),
    release: (key, token) =>
      stmt(`DELETE FROM ${t} WHERE \`key\` = ? AND \`lease_token\` = ? AND \`status\` = 'in_progress'`, [key, token]),
    renew: (key, token, leaseTtl) =>
      stmt(
        `UPDATE ${t} SET \`lease_expires_at\` = ${MYSQL_NOW} + ?, \`expires_at\` = ${MYSQL_NOW} + ?
WHERE \`key\` = ? AND \`lease_token\` = ? AND \`status\` = 'in_progress' AND \`lease_expires_at\` > ${MYSQL_NOW}`,
        [leaseTtl, leaseTtl, key, token],
      ),
    delete: (key) => stmt(`DELETE FROM ${t} WHERE \`key\` = ?`, [key]),
    // The transactional path acquires through `claim` too; it reads a live row it did not
    // claim with a locking read, which sees the latest commit (the claim already holds the
    // row's lock, so it never waits), where a plain SELECT could answer from an older snapshot.
    readAny: (key) => stmt(`SELECT ${COLUMNS}, (${DEAD}) AS dead FROM ${t} WHERE \`key\` = ? FOR UPDATE`, [key]),
    finish: (key, result, ttl) =>
      stmt(
        `UPDATE ${t} SET \`status\` = 'completed', \`result\` = ?, \`expires_at\` = ${MYSQL_NOW} + ?, \`lease_token\` = NULL, \`lease_expires_at\` = NULL WHERE \`key\` = ?`,
        [result, ttl, key],
      ),
    // Single-table DELETE with ORDER BY and LIMIT: both servers take it (no subquery on the
    // same table, which MySQL refuses). The store runs it under READ COMMITTED, so the scan
    // takes no gap locks that would hold up concurrent claims.
    // MariaDB resumes each batch where the last one stopped (`SqlDialect.purgeResume`); MySQL has
    // no DELETE ... RETURNING, so its batches start at the oldest expiry each time.
    purgeBatch: returning
      ? (limit, from) =>
          stmt(`DELETE FROM ${t} WHERE ${DEAD} AND \`expires_at\` >= ? ORDER BY \`expires_at\` LIMIT ? RETURNING \`expires_at\``, [
            from ?? 0,
            limit,
          ])
      : (limit) => stmt(`DELETE FROM ${t} WHERE ${DEAD} ORDER BY \`expires_at\` LIMIT ?`, [limit]),
    probe: () =>
      stmt(
        `SELECT \`key\`, \`status\`, \`lease_token\`, \`lease_expires_at\`, \`fingerprint\`, \`result\`, \`expires_at\`, \`created_at\` FROM ${t} WHERE 1 = 0`,
        [],
      ),
  };
}

/**
 * The DDL of the records table. `key` is binary-collated (keys differ by case; a
 * case-insensitive collation would make two keys one), `result` is MEDIUMTEXT (16 MB:
 * TEXT's 64 KB is below the default maxResponseBytes of 1 MB), and the expiry index is
 * declared inside CREATE TABLE because MySQL has no CREATE INDEX IF NOT EXISTS.
 */
export function mysqlRecordsTableDdl(name: TableName): string[] {
  // MySQL names every primary key PRIMARY.
  return [
    `CREATE TABLE IF NOT EXISTS ${mysqlQuoted(name)} (
  \`key\` varchar(255) NOT NULL,
  \`status\` varchar(16) NOT NULL,
  \`lease_token\` varchar(255) NULL,
  \`lease_expires_at\` bigint NULL,
  \`fingerprint\` varchar(255) NULL,
  \`result\` mediumtext NULL,
  \`expires_at\` bigint NOT NULL,
  \`created_at\` bigint NOT NULL,
  PRIMARY KEY (\`key\`),
  KEY \`${expiryIndexNameOf(name.table)}\` (\`expires_at\`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ];
}

/** Drops what `mysqlRecordsTableDdl` creates (MySQL's indexes belong to their table). */
export function dropMysqlRecordsTableDdl(name: TableName): string[] {
  return [`DROP TABLE IF EXISTS ${mysqlQuoted(name)}`];
}

/** The latest `expires_at` among the rows a purge batch answered (undefined: none). */
export function latestExpiryOf(result: SqlResult): number | undefined {
  let latest: number | undefined;
  for (const row of result.rows) {
    const expiry = Number(row.expires_at);
    if (Number.isFinite(expiry) && (latest === undefined || expiry > latest)) latest = expiry;
  }
  return latest;
}
