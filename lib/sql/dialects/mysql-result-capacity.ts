import { IdempotencyConfigurationError } from '../../core/errors.js';
import type { IdempotencyEvent } from '../../core/events.js';
import type { SqlConnection, SqlDatabase } from '../port.js';
import { plain } from '../statement.js';
import { mysqlQuoted } from './mysql-statements.js';
import { unstorableResult } from './record-row.js';
import type { TableName } from './records-table.js';

/**
 * What a MySQL / MariaDB records table and server can take in one `complete`: the
 * `result` column's size and the largest statement the server accepts
 * (`max_allowed_packet`). A statement over that packet is refused and the server closes the
 * connection (the pool would hand the dead connection to the next caller); a result over
 * the column is refused with ER_DATA_TOO_LONG. Neither ever succeeds on a retry.
 */
export interface ResultCapacity {
  /** Bytes the `result` column holds (`CHARACTER_OCTET_LENGTH`). */
  readonly columnBytes: number;
  /** The column's type as the server shows it, e.g. `text`, `mediumtext`. */
  readonly columnType: string;
  /** `@@max_allowed_packet`, bytes. */
  readonly packetBytes: number;
  /** Collation of the `key` column (null for a binary string column). */
  readonly keyCollation: string | null;
}

/**
 * Bytes a statement needs beyond its result: the SQL text, the key, the token and the
 * numbers (each under 300 bytes, escaped) with room to spare.
 */
export const STATEMENT_OVERHEAD_BYTES = 4096;

/**
 * The largest statement a result of `resultBytes` can make: mysql2 escapes parameters on
 * the client, and every quote, backslash and control character of the result takes two
 * bytes there (JSON escapes its quotes with backslashes, so both double).
 */
export function worstStatementBytes(resultBytes: number): number {
  return 2 * resultBytes + STATEMENT_OVERHEAD_BYTES;
}

const capacities = new WeakMap<object, Map<string, Promise<ResultCapacity>>>();
/** The same, once read: a `complete` then checks its result without an async step. */
const readCapacities = new WeakMap<object, Map<string, ResultCapacity>>();

/**
 * The capacity of `table`, asked once per database and table (a failed read is asked
 * again). Inside a transaction pass its `connection`: with every pooled connection held
 * by transactions that wait for this one's row lock, asking for another connection would
 * wait for ever.
 */
export function mysqlResultCapacityOf(db: SqlDatabase, table: TableName, connection: SqlConnection = db): Promise<ResultCapacity> {
  let byTable = capacities.get(db.identity);
  if (!byTable) capacities.set(db.identity, (byTable = new Map()));
  let known = byTable.get(table.quoted);
  if (!known) {
    const reading = readCapacity(connection, table);
    known = reading;
    byTable.set(table.quoted, reading);
    reading.then(
      (capacity) => {
        let read = readCapacities.get(db.identity);
        if (!read) readCapacities.set(db.identity, (read = new Map()));
        read.set(table.quoted, capacity);
      },
      () => {
        if (byTable.get(table.quoted) === reading) byTable.delete(table.quoted);
      },
    );
  }
  return known;
}

/** What `mysqlResultCapacityOf` read already, if it did. */
export function knownMysqlResultCapacity(db: SqlDatabase, table: TableName): ResultCapacity | undefined {
  return readCapacities.get(db.identity)?.get(table.quoted);
}

/** Forgets what was read (verify() reads again: the table may have been altered since). */
export function forgetResultCapacity(db: SqlDatabase, table: TableName): void {
  capacities.get(db.identity)?.delete(table.quoted);
  readCapacities.get(db.identity)?.delete(table.quoted);
}

async function readCapacity(connection: SqlConnection, table: TableName): Promise<ResultCapacity> {
  const query = async (sql: string, params: unknown[]) => (await connection.run(plain(sql, params))).rows;
  const rows = (await query(
    `SELECT @@max_allowed_packet AS packet, c.COLUMN_NAME AS name, c.DATA_TYPE AS type, c.CHARACTER_OCTET_LENGTH AS octets, c.COLLATION_NAME AS collation
FROM information_schema.COLUMNS c
WHERE c.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND c.TABLE_NAME = ? AND c.COLUMN_NAME IN ('key', 'result')`,
    [table.schema ?? null, table.table],
  )) as Array<{ packet: unknown; name: string; type: string; octets: unknown; collation: string | null }>;
  const result = rows.find((row) => String(row.name).toLowerCase() === 'result');
  const key = rows.find((row) => String(row.name).toLowerCase() === 'key');
  const packet = rows[0]?.packet ?? ((await query('SELECT @@max_allowed_packet AS packet', [])) as Array<{ packet: unknown }>)[0]?.packet;
  return {
    // Unknown (no such column: the probe reports that) counts as unlimited here.
    columnBytes: result ? Number(result.octets ?? Number.POSITIVE_INFINITY) : Number.POSITIVE_INFINITY,
    columnType: result ? String(result.type).toLowerCase() : 'unknown',
    packetBytes: Number(packet),
    keyCollation: key ? (key.collation ?? null) : null,
  };
}

/** Why `result` can never be stored in a table of this capacity, or undefined when it can. */
export function unstorableResultReason(result: string, capacity: ResultCapacity): string | undefined {
  // A UTF-16 code unit is at most 3 UTF-8 bytes, and escaping at most doubles a byte: most
  // results need no count at all.
  const upperBound = result.length * 3;
  if (upperBound <= capacity.columnBytes && worstStatementBytes(upperBound) <= capacity.packetBytes) return undefined;
  const bytes = Buffer.byteLength(result);
  if (bytes > capacity.columnBytes) {
    return `the response is ${bytes} bytes, over what the records table's result column (${capacity.columnType}) holds (${capacity.columnBytes} bytes)`;
  }
  const statementBytes = bytes + escapedCharacters(result) + STATEMENT_OVERHEAD_BYTES;
  if (statementBytes > capacity.packetBytes) {
    return `the response is ${bytes} bytes, and storing it takes a ${statementBytes}-byte statement, over the server's max_allowed_packet (${capacity.packetBytes})`;
  }
  return undefined;
}

/**
 * MySQL family: the result to store, `result` itself or, for one the table or the server
 * can never take, the not-storable outcome standing for it (`report`ed once, as a
 * `response_not_storable` event). Storing it would fail on every retry until the lease is
 * lost, and a statement over `max_allowed_packet` also makes the server close the
 * connection; the key completes instead, and a duplicate does not run the handler again.
 * The capacity is read once per table (`connection`: see `mysqlResultCapacityOf`).
 */
export async function storableMysqlResult(
  db: SqlDatabase,
  table: TableName,
  key: string,
  result: string,
  report: (event: IdempotencyEvent) => void,
  connection?: SqlConnection,
): Promise<string> {
  const capacity = knownMysqlResultCapacity(db, table) ?? (await mysqlResultCapacityOf(db, table, connection));
  const reason = unstorableResultReason(result, capacity);
  if (!reason) return result;
  report({ type: 'response_not_storable', key, at: Date.now(), durationMs: 0, reason });
  return unstorableResult(reason);
}

/** Characters mysql2 escapes with a backslash (`\0 \b \t \n \r \x1a " ' \`). */
function escapedCharacters(text: string): number {
  let count = 0;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (
      code === 0x22 ||
      code === 0x27 ||
      code === 0x5c ||
      code === 0 ||
      code === 8 ||
      code === 9 ||
      code === 10 ||
      code === 13 ||
      code === 26
    ) {
      count++;
    }
  }
  return count;
}

/**
 * Boot check: refuses a table or server that cannot store a result of `maxResponseBytes`
 * (the largest result the engine hands the store), or whose key column ignores case.
 */
export function checkResultCapacity(table: TableName, capacity: ResultCapacity, maxResponseBytes: number): void {
  const quoted = mysqlQuoted(table);
  if (capacity.columnBytes < maxResponseBytes) {
    const type = maxResponseBytes <= 16_777_215 ? 'MEDIUMTEXT' : 'LONGTEXT';
    throw new IdempotencyConfigurationError(
      `The result column of the idempotency records table ${quoted} is ${capacity.columnType.toUpperCase()}, which holds ${capacity.columnBytes} bytes: ` +
        `less than maxResponseBytes (${maxResponseBytes}). A larger response could never be stored, and its handler would run again on a retry.`,
      `Run ALTER TABLE ${quoted} MODIFY \`result\` ${type} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL ` +
        '(a table made by TypeORM from IdempotencyRecordEntity before 0.5 has TEXT), or lower maxResponseBytes.',
    );
  }
  const needed = worstStatementBytes(maxResponseBytes);
  if (capacity.packetBytes < needed) {
    throw new IdempotencyConfigurationError(
      `The server's max_allowed_packet (${capacity.packetBytes} bytes) is too small for maxResponseBytes (${maxResponseBytes}): ` +
        `storing a result that large takes a statement of up to ${needed} bytes, which the server would refuse, closing the connection.`,
      `Raise it to at least ${needed} (SET GLOBAL max_allowed_packet = ${needed}; and max_allowed_packet = ${needed} under [mysqld] ` +
        'in the server configuration, so it survives a restart), or lower maxResponseBytes.',
    );
  }
  if (capacity.keyCollation !== null && !/_bin$/i.test(capacity.keyCollation)) {
    throw new IdempotencyConfigurationError(
      `The key column of the idempotency records table ${quoted} has the collation ${capacity.keyCollation}, which ignores case: ` +
        "two keys that differ only by case would be one record, and one request would replay another one's response.",
      `Run ALTER TABLE ${quoted} MODIFY \`key\` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL.`,
    );
  }
}
