import type { StagedOutbox } from '../core/outbox-store.js';
import type { RecordDialect } from './dialect.js';
import type { TableName } from './dialects/records-table.js';
import { MYSQL_NOW, mysqlQuoted } from './dialects/mysql-statements.js';
import { plain, type Statement } from './statement.js';

/*
 * The outbox in SQL (docs/outbox.md): a table of its own beside the records table,
 * `<records table>_outbox`, one row per execution that staged messages (its messages as a
 * JSON array, in staging order), inserted in the transaction that completes the record.
 * A relay claims rows with FOR UPDATE SKIP LOCKED and a claim lease (`claimed_by`,
 * `claimed_until`, on the server's clock): two instances never hold one row, and a row
 * whose relay died is claimed again once its lease ran out. `next` counts the messages
 * sent (confirmed), so a retry resumes after them; `sent_at` marks the row done, kept
 * for the retention.
 */

const PG_NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;

/** The outbox statements of one records table. */
export interface OutboxStatements {
  /** The outbox table, quoted the dialect's way. */
  readonly quoted: string;
  /** Its DDL (`ensureTable()`, the migration). Idempotent. */
  createTable(): string[];
  /** Drops it (a migration's `down`). */
  dropTable(): string[];
  /** Stages one execution's messages (nothing when its id is there already: a repeated completion). */
  insert(key: string, staged: StagedOutbox): Statement;
  /**
   * PostgreSQL: the record's completion (`complete`, an UPDATE of the records table whose
   * parameters are $1-$4) and the staging as one statement, answering a row whose
   * `completed` counts the records completed (0: the lease was not ours, nothing staged).
   */
  completeAndStage?(complete: Statement, key: string, staged: StagedOutbox): Statement;
  /** Claims up to `limit` due rows for `owner` during `claimTtl` ms, oldest first, skipping rows other claims lock (one statement). */
  claim?(owner: string, limit: number, claimTtl: number): Statement;
  /**
   * Where one statement cannot claim (MySQL family: an UPDATE cannot read its own table in
   * a subquery), the three statements of a claim run in one transaction: lock the due
   * rows (`FOR UPDATE SKIP LOCKED`), mark them, read them.
   */
  claimSteps?: {
    lockDue(limit: number): Statement;
    mark(owner: string, ids: readonly string[], claimTtl: number): Statement;
    read(ids: readonly string[]): Statement;
  };
  /** Settles `owner`'s claim of a row: `next` sent; the rest due in `retryDelay` ms. */
  settle(id: string, owner: string, next: number, retryDelay: number, error: string | undefined): Statement;
  /** How many rows wait, and the oldest one's staging time. */
  backlog(): Statement;
  /** Deletes up to `limit` rows sent more than `retention` ms ago. */
  purgeSent(retention: number, limit: number): Statement;
  /** Selects every column and no row: the boot check that the schema holds the outbox. */
  probe(): Statement;
}

/** `<table>_outbox` in the records table's schema. */
export function outboxTableOf(records: TableName): TableName {
  const table = `${records.table}_outbox`;
  return { schema: records.schema, table, quoted: (records.schema ? `"${records.schema}".` : '') + `"${table}"` };
}

/** The outbox statements of `records` for `dialect`; undefined where the outbox is not built yet. */
export function outboxStatements(dialect: RecordDialect, records: TableName): OutboxStatements | undefined {
  if (dialect === 'postgres') return postgresOutbox(outboxTableOf(records));
  if (dialect === 'mysql') return mysqlOutbox(outboxTableOf(records));
  return undefined;
}

const COLUMNS = `"id", "key", "messages", "count", "next", "attempts", "staged_at", "available_at", "claimed_by", "claimed_until", "sent_at", "last_error"`;

function postgresOutbox(outbox: TableName): OutboxStatements {
  const t = outbox.quoted;
  return {
    quoted: t,
    createTable: () => [
      `CREATE TABLE IF NOT EXISTS ${t} (
  "id" varchar(64) NOT NULL,
  "key" varchar(255) NOT NULL,
  "messages" text NOT NULL,
  "count" integer NOT NULL,
  "next" integer NOT NULL DEFAULT 0,
  "attempts" integer NOT NULL DEFAULT 0,
  "staged_at" bigint NOT NULL,
  "available_at" bigint NOT NULL,
  "claimed_by" varchar(64),
  "claimed_until" bigint NOT NULL DEFAULT 0,
  "sent_at" bigint,
  "last_error" text,
  CONSTRAINT "pk_${outbox.table}" PRIMARY KEY ("id")
)`,
      `CREATE INDEX IF NOT EXISTS "idx_${outbox.table}_due" ON ${t} ("available_at") WHERE "sent_at" IS NULL`,
      `CREATE INDEX IF NOT EXISTS "idx_${outbox.table}_sent_at" ON ${t} ("sent_at") WHERE "sent_at" IS NOT NULL`,
    ],
    dropTable: () => [`DROP TABLE IF EXISTS ${t}`],
    insert: (key, staged) =>
      plain(
        `INSERT INTO ${t} ("id", "key", "messages", "count", "staged_at", "available_at")
SELECT $1::varchar, $2::varchar, $3::text, $4::integer, c.now_ms, c.now_ms FROM (SELECT ${PG_NOW} AS now_ms) c
ON CONFLICT ("id") DO NOTHING`,
        [staged.id, key, staged.messages, staged.count],
      ),
    completeAndStage: (complete, key, staged) =>
      plain(
        `WITH "done" AS (${complete.sql}
RETURNING 1),
"staged" AS (INSERT INTO ${t} ("id", "key", "messages", "count", "staged_at", "available_at")
SELECT $${complete.params.length + 1}::varchar, $${complete.params.length + 2}::varchar, $${complete.params.length + 3}::text, $${complete.params.length + 4}::integer, n.now_ms, n.now_ms
FROM (SELECT count(*) AS "n" FROM "done") d, (SELECT ${PG_NOW} AS now_ms) n WHERE d."n" > 0
ON CONFLICT ("id") DO NOTHING)
SELECT count(*)::integer AS "completed" FROM "done"`,
        [...complete.params, staged.id, key, staged.messages, staged.count],
      ),
    claim: (owner, limit, claimTtl) =>
      plain(
        `UPDATE ${t} SET "claimed_by" = $1::varchar, "claimed_until" = ${PG_NOW} + $3::bigint
WHERE "id" IN (SELECT "id" FROM ${t} WHERE "sent_at" IS NULL AND "available_at" <= ${PG_NOW} AND "claimed_until" <= ${PG_NOW}
  ORDER BY "available_at", "staged_at" LIMIT $2::integer FOR UPDATE SKIP LOCKED)
RETURNING "id", "messages", "next", "attempts", "staged_at"`,
        [owner, limit, claimTtl],
      ),
    settle: (id, owner, next, retryDelay, error) =>
      plain(
        `UPDATE ${t} SET "next" = GREATEST("next", $3::integer),
  "sent_at" = CASE WHEN GREATEST("next", $3::integer) >= "count" THEN ${PG_NOW} END,
  "attempts" = "attempts" + CASE WHEN GREATEST("next", $3::integer) >= "count" THEN 0 ELSE 1 END,
  "available_at" = ${PG_NOW} + $4::bigint, "claimed_by" = NULL, "claimed_until" = 0, "last_error" = $5::text
WHERE "id" = $1::varchar AND "claimed_by" = $2::varchar`,
        [id, owner, next, retryDelay, error ?? null],
      ),
    backlog: () => plain(`SELECT count(*)::integer AS "pending", min("staged_at") AS "oldest" FROM ${t} WHERE "sent_at" IS NULL`),
    purgeSent: (retention, limit) =>
      plain(
        `DELETE FROM ${t} WHERE "id" IN (SELECT "id" FROM ${t} WHERE "sent_at" IS NOT NULL AND "sent_at" <= ${PG_NOW} - $1::bigint LIMIT $2::integer)`,
        [retention, limit],
      ),
    probe: () => plain(`SELECT ${COLUMNS} FROM ${t} WHERE 1 = 0`),
  };
}

/** MySQL 8 and MariaDB 10.6+ (SKIP LOCKED). */
function mysqlOutbox(outbox: TableName): OutboxStatements {
  const t = mysqlQuoted(outbox);
  const marks = (ids: readonly string[]) => ids.map(() => '?').join(', ');
  return {
    quoted: t,
    createTable: () => [
      `CREATE TABLE IF NOT EXISTS ${t} (
  \`id\` varchar(64) NOT NULL,
  \`key\` varchar(255) NOT NULL,
  \`messages\` longtext NOT NULL,
  \`count\` int NOT NULL,
  \`next\` int NOT NULL DEFAULT 0,
  \`attempts\` int NOT NULL DEFAULT 0,
  \`staged_at\` bigint NOT NULL,
  \`available_at\` bigint NOT NULL,
  \`claimed_by\` varchar(64) NULL,
  \`claimed_until\` bigint NOT NULL DEFAULT 0,
  \`sent_at\` bigint NULL,
  \`last_error\` text NULL,
  PRIMARY KEY (\`id\`),
  KEY \`idx_${outbox.table}_due\` (\`sent_at\`, \`available_at\`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
    dropTable: () => [`DROP TABLE IF EXISTS ${t}`],
    insert: (key, staged) =>
      plain(
        `INSERT INTO ${t} (\`id\`, \`key\`, \`messages\`, \`count\`, \`staged_at\`, \`available_at\`)
VALUES (?, ?, ?, ?, ${MYSQL_NOW}, ${MYSQL_NOW}) ON DUPLICATE KEY UPDATE \`id\` = \`id\``,
        [staged.id, key, staged.messages, staged.count],
      ),
    claimSteps: {
      lockDue: (limit) =>
        plain(
          `SELECT \`id\` FROM ${t} WHERE \`sent_at\` IS NULL AND \`available_at\` <= ${MYSQL_NOW} AND \`claimed_until\` <= ${MYSQL_NOW}
ORDER BY \`available_at\`, \`staged_at\` LIMIT ? FOR UPDATE SKIP LOCKED`,
          [limit],
        ),
      mark: (owner, ids, claimTtl) =>
        plain(`UPDATE ${t} SET \`claimed_by\` = ?, \`claimed_until\` = ${MYSQL_NOW} + ? WHERE \`id\` IN (${marks(ids)})`, [
          owner,
          claimTtl,
          ...ids,
        ]),
      read: (ids) =>
        plain(`SELECT \`id\`, \`messages\`, \`next\`, \`attempts\`, \`staged_at\` FROM ${t} WHERE \`id\` IN (${marks(ids)})`, [...ids]),
    },
    // MySQL assigns left to right, each later expression seeing the new values: \`next\` goes last.
    settle: (id, owner, next, retryDelay, error) =>
      plain(
        `UPDATE ${t} SET \`sent_at\` = CASE WHEN GREATEST(\`next\`, ?) >= \`count\` THEN ${MYSQL_NOW} END,
  \`attempts\` = \`attempts\` + CASE WHEN GREATEST(\`next\`, ?) >= \`count\` THEN 0 ELSE 1 END,
  \`available_at\` = ${MYSQL_NOW} + ?, \`claimed_by\` = NULL, \`claimed_until\` = 0, \`last_error\` = ?, \`next\` = GREATEST(\`next\`, ?)
WHERE \`id\` = ? AND \`claimed_by\` = ?`,
        [next, next, retryDelay, error ?? null, next, id, owner],
      ),
    backlog: () => plain(`SELECT COUNT(*) AS \`pending\`, MIN(\`staged_at\`) AS \`oldest\` FROM ${t} WHERE \`sent_at\` IS NULL`),
    purgeSent: (retention, limit) =>
      plain(`DELETE FROM ${t} WHERE \`sent_at\` IS NOT NULL AND \`sent_at\` <= ${MYSQL_NOW} - ? ORDER BY \`sent_at\` LIMIT ?`, [
        retention,
        limit,
      ]),
    probe: () => plain(`SELECT ${COLUMNS.replaceAll('"', '`')} FROM ${t} WHERE 1 = 0`),
  };
}
