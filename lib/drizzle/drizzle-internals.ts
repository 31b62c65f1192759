/**
 * Every read of a drizzle-orm field that its types do not publish, in one place:
 * test/drizzle/internals.spec.ts checks each of them on the installed drizzle-orm, so an
 * upgrade that moves one breaks that test, not a request path. Nothing here imports
 * drizzle-orm: a database is recognised by the entity kinds drizzle registers on its
 * classes under a global symbol.
 */

/** drizzle-orm's own class tag (`entity.ts`): a global symbol, the same in its ESM and CJS builds. */
const ENTITY_KIND = Symbol.for('drizzle:entityKind');

/** A node-postgres pool or client: both take a query config and return a promise. */
export interface PgQueryable {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** A node-postgres pool, as far as the store uses it. */
export interface PgPool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
  on(event: 'connect', listener: (client: PgEventSource) => void): unknown;
}

/** A client checked out of a node-postgres pool. */
export interface PgPoolClient extends PgQueryable, PgEventSource {
  release(error?: Error | boolean): void;
}

/** What the client-error guard needs of a pg client. */
export interface PgEventSource {
  on(event: 'error', listener: () => void): unknown;
  listeners(event: 'error'): Function[];
}

/** A mysql2 promise pool, pool connection or connection, as far as the store uses it. */
export interface MysqlQueryable {
  query(sql: string, values: unknown[]): Promise<[unknown, unknown]>;
}

/** A mysql2 promise pool. */
export interface MysqlPool extends MysqlQueryable {
  getConnection(): Promise<MysqlPoolConnection>;
}

/** A connection checked out of a mysql2 promise pool. */
export interface MysqlPoolConnection extends MysqlQueryable {
  release(): void;
  /** Closes the socket: a connection whose state is unknown never goes back to the pool. */
  destroy(): void;
}

/** The drivers the store speaks: drizzle-orm's node-postgres and mysql2 ones. */
export type DrizzleDriver =
  | { readonly dialect: 'postgres'; readonly client: PgQueryable; readonly pool: PgPool | undefined }
  | { readonly dialect: 'mysql'; readonly client: MysqlQueryable; readonly pool: MysqlPool | undefined };

/** The entity kinds of `value`'s class and its ancestors, e.g. ['NodePgDatabase', 'PgDatabase']. */
export function entityKindsOf(value: unknown): string[] {
  const kinds: string[] = [];
  let proto = value !== null && typeof value === 'object' ? Object.getPrototypeOf(value) : null;
  for (let depth = 0; proto && depth < 8; depth++) {
    const kind = (proto.constructor as Record<symbol, unknown> | undefined)?.[ENTITY_KIND];
    if (typeof kind === 'string' && !kinds.includes(kind)) kinds.push(kind);
    proto = Object.getPrototypeOf(proto);
  }
  return kinds;
}

/**
 * The session a Drizzle database or transaction runs its queries on: `db.session` (marked
 * internal in drizzle's types; the only one on MySQL), or `db._.session` (PostgreSQL).
 */
function sessionOf(db: unknown): unknown {
  const candidate = db as { session?: unknown; _?: { session?: unknown } } | null;
  return candidate?.session ?? candidate?._?.session;
}

/**
 * The driver under a Drizzle database or transaction: its session's client (`session.client`,
 * private in drizzle's types), a pool for a database made on one, the checked-out
 * connection inside a transaction. `undefined` for anything else (another driver, not a
 * Drizzle database).
 */
export function drizzleDriverOf(db: unknown): DrizzleDriver | undefined {
  const session = sessionOf(db);
  const kinds = entityKindsOf(session);
  const client = (session as { client?: unknown } | undefined)?.client;
  if (client === null || typeof client !== 'object') return undefined;
  if (kinds.includes('NodePgSession') && typeof (client as PgQueryable).query === 'function') {
    const pool = typeof (client as PgPool).connect === 'function' && isPgPool(client) ? (client as PgPool) : undefined;
    return { dialect: 'postgres', client: client as PgQueryable, pool };
  }
  if (kinds.includes('MySql2Session') && typeof (client as MysqlQueryable).query === 'function') {
    const pool = typeof (client as MysqlPool).getConnection === 'function' ? (client as MysqlPool) : undefined;
    return { dialect: 'mysql', client: client as MysqlQueryable, pool };
  }
  return undefined;
}

/** What drizzle-orm itself tests to tell a pg Pool from a Client (node-postgres/session.ts). */
function isPgPool(client: object): boolean {
  return Object.getPrototypeOf(client)?.constructor?.name?.includes('Pool') === true || 'totalCount' in client;
}

/** True for a Drizzle transaction (`tx`), which is also a database to drizzle's types. */
export function isDrizzleTransaction(db: unknown): boolean {
  const kinds = entityKindsOf(db);
  return kinds.includes('PgTransaction') || kinds.includes('MySqlTransaction');
}

/** True for a Drizzle database of any driver (to tell a wrong driver from something else). */
export function isDrizzleDatabase(db: unknown): boolean {
  const kinds = entityKindsOf(db);
  return kinds.some((kind) => kind.endsWith('Database') || kind.endsWith('Transaction'));
}
