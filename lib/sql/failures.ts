import { IdempotencyConfigurationError } from '../core/errors.js';
import { nameOf, type TableName } from './dialects/records-table.js';

/** How an entry point tells its users to create the records table, or replace a foreign one (the hints of `configurationErrorOf`). */
export interface TableFixes {
  /** The hint for a missing table, given its name as the user writes it. */
  missingTable(name: string): string;
  /** The hint for a table that lacks a column the store needs. */
  readonly missingColumn: string;
}

/**
 * The SQLSTATE of a failed statement: node-postgres puts it on the error itself,
 * TypeORM's `QueryFailedError` on its `driverError` (and copies it up on 0.3 only).
 */
export function sqlStateOf(error: unknown): string | undefined {
  // drizzle-orm wraps the driver's error of a query it ran in a DrizzleQueryError whose cause it is.
  const candidate = error as { code?: unknown; driverError?: { code?: unknown }; cause?: { code?: unknown } } | undefined;
  const code = candidate?.driverError?.code ?? candidate?.code ?? candidate?.cause?.code;
  return typeof code === 'string' ? code : undefined;
}

function messagesOf(error: unknown): string[] {
  const messages: string[] = [];
  // The cause chain is short (QueryFailedError -> driver error); the bound guards a cycle.
  let current: unknown = error;
  for (let depth = 0; depth < 4 && isErrorLike(current); depth++) {
    messages.push(current.message);
    const next = (current as { driverError?: unknown }).driverError ?? current.cause;
    current = next === current ? undefined : next;
  }
  return messages;
}

/** The MySQL / MariaDB error number of a failed statement (mysql2 puts it on `errno`). */
export function mysqlErrnoOf(error: unknown): number | undefined {
  const candidate = error as { errno?: unknown; driverError?: { errno?: unknown }; cause?: { errno?: unknown } } | undefined;
  const errno = candidate?.driverError?.errno ?? candidate?.errno ?? candidate?.cause?.errno;
  return typeof errno === 'number' ? errno : undefined;
}

/** PostgreSQL 42P01 (undefined_table), MySQL 1146 (ER_NO_SUCH_TABLE, by name or number: Prisma's adapter gives the number only) or SQLite's "no such table". */
export function isMissingTableError(error: unknown): boolean {
  const code = sqlStateOf(error);
  return (
    code === '42P01' ||
    code === 'ER_NO_SUCH_TABLE' ||
    mysqlErrnoOf(error) === 1146 ||
    messagesOf(error).some((message) => /\bno such table\b/i.test(message))
  );
}

/** PostgreSQL 42703 (undefined_column), MySQL 1054 (ER_BAD_FIELD_ERROR) or SQLite's "no such column" / "has no column named". */
export function isMissingColumnError(error: unknown): boolean {
  const code = sqlStateOf(error);
  return (
    code === '42703' ||
    code === 'ER_BAD_FIELD_ERROR' ||
    mysqlErrnoOf(error) === 1054 ||
    messagesOf(error).some((message) => /\bno such column\b|\bhas no column named\b/i.test(message))
  );
}

/**
 * InnoDB errors that only say "try the transaction again": 1213 (ER_LOCK_DEADLOCK: InnoDB
 * rolled the whole transaction back to break a deadlock, gap locks included) and 1205
 * (ER_LOCK_WAIT_TIMEOUT: a lock wait ran past innodb_lock_wait_timeout).
 */
export function transientLockErrorOf(error: unknown): 'deadlock' | 'lock_wait_timeout' | undefined {
  const errno = mysqlErrnoOf(error);
  if (errno === 1213) return 'deadlock';
  if (errno === 1205) return 'lock_wait_timeout';
  return undefined;
}

/**
 * SQLSTATEs that mean the session is gone: class 08 (connection exception), and the
 * server ending it (57P01 admin_shutdown, which `pg_terminate_backend` sends; 57P02
 * crash_shutdown; 57P03 cannot_connect_now).
 */
const LOST_SESSION_STATES = /^(08...|57P0[123])$/;
const SOCKET_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  // mysql2: the server closed the socket (KILL CONNECTION, a restart), or it went quiet.
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  // MySQL / MariaDB: this session was killed, or the server is going down.
  'ER_CONNECTION_KILLED',
  'ER_SERVER_SHUTDOWN',
  'ER_CLIENT_INTERACTION_TIMEOUT',
]);
/**
 * What node-postgres says when the socket closed under a client, or a query was sent on
 * such a client; and mysql2's "Can't add new command when connection is in closed state".
 */
const LOST_CLIENT_MESSAGE =
  /Connection terminated|not queryable|Client was closed|Connection ended unexpectedly|connection is in closed state/i;

/**
 * Whether `error` says the database connection was lost (or could not be opened), as
 * opposed to a statement the database refused.
 */
export function isConnectionLoss(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < 4 && isErrorLike(current); depth++) {
    // TypeORM refuses every call on a runner it released because its pg client failed.
    if (current.name === 'QueryRunnerAlreadyReleasedError') return true;
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && (LOST_SESSION_STATES.test(code) || SOCKET_CODES.has(code))) return true;
    if (LOST_CLIENT_MESSAGE.test(current.message)) return true;
    const next = (current as { driverError?: unknown }).driverError ?? current.cause;
    current = next === current ? undefined : next;
  }
  return false;
}

/**
 * The configuration error that a failure of the store's own SQL stands for (its table, or
 * a column of it, does not exist), or `undefined` when the failure is not one: retrying
 * never helps with a missing table, so it must not read as an outage.
 */
export function configurationErrorOf(error: unknown, table: TableName, fixes: TableFixes): IdempotencyConfigurationError | undefined {
  let problem: IdempotencyConfigurationError | undefined;
  if (isMissingTableError(error)) {
    problem = new IdempotencyConfigurationError(
      `The idempotency records table ${table.quoted} does not exist.`,
      fixes.missingTable(nameOf(table)),
      {
        cause: error,
      },
    );
  } else if (isMissingColumnError(error)) {
    problem = new IdempotencyConfigurationError(
      `The idempotency records table ${table.quoted} lacks a column the store needs (${messagesOf(error)[0] ?? 'undefined column'}).`,
      fixes.missingColumn,
      { cause: error },
    );
  }
  return problem;
}

/**
 * An error by its shape: errors made by Node's own modules (a socket's EPIPE, ECONNRESET)
 * come from another realm under test runners such as Jest, where `instanceof Error` is false.
 */
function isErrorLike(value: unknown): value is Error {
  return typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string';
}
