/**
 * What the stores that open their own connections (createTypeOrmIdempotencyStore,
 * createDrizzleIdempotencyStore) say about the server they could not reach: its type, host,
 * port and database, never the user's password.
 */

/** The server a store connects to: from its URL, or from connection options. */
export type OwnedServer =
  { type: string; url: URL } | { type: string; host?: string | undefined; port?: number | undefined; database?: string | undefined };

/** `postgres at db.internal:5432/payments`: the URL without its user, password or query. */
export function describeServer(server: OwnedServer): string {
  if ('url' in server) {
    const { hostname, port, pathname } = server.url;
    return `${server.type} at ${hostname || 'localhost'}${port ? `:${port}` : ''}${pathname && pathname !== '/' ? pathname : ''}`;
  }
  const where = `${server.host ?? 'localhost'}${server.port === undefined ? '' : `:${server.port}`}`;
  return `${server.type} at ${where}${server.database === undefined ? '' : `/${server.database}`}`;
}

/** The passwords that must never appear in a message: the URL's (as written and decoded) and one given as an option. */
export function secretsOf(url: URL | undefined, password: unknown): string[] {
  const secrets = new Set<string>();
  if (url?.password) {
    secrets.add(url.password);
    try {
      secrets.add(decodeURIComponent(url.password));
    } catch {
      // Not percent-encoded: the raw form is enough.
    }
  }
  if (typeof password === 'string' && password !== '') secrets.add(password);
  return [...secrets];
}

/** `text` with every secret replaced by `***` (a driver's message may repeat what it was given). */
export function withoutSecrets(text: string, secrets: readonly string[]): string {
  let clean = text;
  for (const secret of secrets) clean = clean.split(secret).join('***');
  return clean;
}

/** Server answers that waiting does not change: a wrong user or password, a database that does not exist. */
const REFUSALS = new Set(['28P01', '28000', '3D000', 'ER_ACCESS_DENIED_ERROR', 'ER_DBACCESS_DENIED_ERROR', 'ER_BAD_DB_ERROR']);

/** True when the server refused the connection for good (credentials, database name): the boot stops at once instead of retrying. */
export function isConnectionRefusedForGood(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && REFUSALS.has(code);
}
