// No TypeORM import: the check works on raw driver errors too.

interface DriverErrorShape {
  code?: unknown;
  errno?: unknown;
  number?: unknown;
  message?: unknown;
  driverError?: unknown;
  cause?: unknown;
}

/**
 * True when `error` (a TypeORM `QueryFailedError` or a raw driver error) reports a
 * duplicate key on a unique index or primary key:
 * - PostgreSQL / CockroachDB: SQLSTATE `23505`
 * - SQLite: `SQLITE_CONSTRAINT_UNIQUE` / `SQLITE_CONSTRAINT_PRIMARYKEY`, or a generic
 *   `SQLITE_CONSTRAINT` (or sql.js's code-less error) whose message says
 *   "UNIQUE constraint failed" (NOT NULL and CHECK failures share the generic code)
 * - MySQL / MariaDB: `ER_DUP_ENTRY` (errno 1062)
 * - SQL Server: error numbers 2627 and 2601
 * - Oracle: `ORA-00001`
 */
export function isUniqueViolation(error: unknown): boolean {
  const seen = new Set<unknown>();
  let current: unknown = error;
  // Walk the wrappers: QueryFailedError.driverError, Error.cause.
  while (current !== null && typeof current === 'object' && !seen.has(current)) {
    seen.add(current);
    if (matches(current as DriverErrorShape)) return true;
    const shape = current as DriverErrorShape;
    current = shape.driverError ?? shape.cause;
  }
  return false;
}

function matches(error: DriverErrorShape): boolean {
  const code = typeof error.code === 'string' ? error.code : undefined;
  const message = typeof error.message === 'string' ? error.message : '';
  if (code === '23505') return true;
  if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') return true;
  if ((code === 'SQLITE_CONSTRAINT' || code === undefined) && /UNIQUE constraint failed/.test(message)) return true;
  if (code === 'ER_DUP_ENTRY' || error.errno === 1062) return true;
  if (error.number === 2627 || error.number === 2601) return true;
  if (/\bORA-00001\b/.test(message)) return true;
  return false;
}
