/** One statement and its positional parameters. */
export interface Statement {
  readonly sql: string;
  readonly params: unknown[];
  /**
   * Prepared-statement name (PostgreSQL through node-postgres): the server parses and
   * plans the statement once per connection instead of on every call. Every builder sets
   * it, `undefined` for a statement sent unprepared.
   */
  readonly name: string | undefined;
}

/** What one statement answered. */
export interface SqlResult {
  readonly rows: Record<string, unknown>[];
  /** Rows the statement wrote or, for an UPDATE on MySQL, found (see `mysqlHeaderOf`). */
  readonly affected: number;
  /** MySQL family: the OK packet's insert id (the claim puts its clock there when it claims). */
  readonly insertId?: number;
}
