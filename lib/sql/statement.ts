/** One statement and its positional parameters. */
export interface Statement {
  readonly sql: string;
  readonly params: unknown[];
  /**
   * Prepared-statement name (PostgreSQL through node-postgres): the server parses and
   * plans the statement once per connection instead of on every call. Every builder sets
   * it, `undefined` for a statement sent unprepared. A database that cannot prepare by
   * name (Prisma, Drizzle) ignores it.
   */
  readonly name: string | undefined;
}

/** What one statement answered. */
export interface SqlResult {
  readonly rows: Record<string, unknown>[];
  /** Rows the statement wrote or, for an UPDATE on MySQL, found (see `mysqlHeaderOf`). */
  readonly affected: number;
  /**
   * MySQL family: the OK packet's insert id (the claim puts its clock there when it
   * claims). Absent when the driver does not report it: the dialects then read the row.
   */
  readonly insertId?: number;
}

/** A statement with no prepared-statement name. */
export function plain(sql: string, params: unknown[] = []): Statement {
  return { name: undefined, sql, params };
}

const answersRowsCache = new Map<string, boolean>();

/**
 * Whether a statement answers rows (a SELECT, a WITH query, anything with RETURNING)
 * rather than only a count of rows: what a database whose API asks which one it wants
 * (Prisma's `$queryRaw` / `$executeRaw`) reads. Every statement of the dialects follows
 * this rule. Cached per text: the dialects' texts are constant per table.
 */
export function answersRows(statement: Statement): boolean {
  let known = answersRowsCache.get(statement.sql);
  if (known === undefined) {
    known = /^\s*(SELECT|WITH)\b/i.test(statement.sql) || /\bRETURNING\b/i.test(statement.sql);
    if (answersRowsCache.size < 1_000) answersRowsCache.set(statement.sql, known);
  }
  return known;
}
