/**
 * What the stores that open their own connections (createTypeOrmIdempotencyStore,
 * createDrizzleIdempotencyStore) say about the server they could not reach: its type, host,
 * port and database, never the user's password; and how they wait for it at boot.
 */
import { IdempotencyConfigurationError, isIdempotencyError } from '../core/errors.js';

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

/** Whom a boot wait is for: the function that made the store, its server, how long to wait, what to keep out of messages. */
export interface OwnedBoot {
  readonly owner: string;
  readonly server: OwnedServer;
  readonly readyTimeout: number;
  readonly secrets: readonly string[];
}

/** The store was closed (application shutting down) before its first connection. */
export function closedBeforeReady({ owner, server }: OwnedBoot): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `${owner}: the store was closed before it connected to ${describeServer(server)}.`,
    'Nothing to fix if the application was shutting down; otherwise do not call close() on the store before app.init() resolves.',
  );
}

/**
 * The owned stores' boot: `connect` tried every 500 ms until it resolves, `readyTimeout`
 * passes, the server refuses for good (credentials, database name) or the store is closed
 * (`closed()`). The library's own errors from `connect` end the wait as they are; the last
 * driver error is reported without its secrets.
 */
export async function waitForServer(boot: OwnedBoot, connect: () => Promise<void>, closed: () => boolean): Promise<void> {
  const { owner, server, readyTimeout, secrets } = boot;
  const deadline = Date.now() + readyTimeout;
  let lastError: unknown;
  for (;;) {
    if (closed()) throw closedBeforeReady(boot);
    try {
      await connect();
      return;
    } catch (error) {
      if (isIdempotencyError(error)) throw error;
      lastError = error;
    }
    const left = deadline - Date.now();
    if (left <= 0 || isConnectionRefusedForGood(lastError)) break;
    await new Promise((resolve) => setTimeout(resolve, Math.min(500, left)));
  }
  const refused = isConnectionRefusedForGood(lastError);
  const message = (lastError as Error | undefined)?.message;
  const reason = typeof message === 'string' && message !== '' ? ` Last error: ${withoutSecrets(message, secrets)}.` : '';
  throw new IdempotencyConfigurationError(
    `${owner}: could not connect to ${describeServer(server)}${refused ? '' : ` within ${readyTimeout} ms`}, so the application cannot start protected.${reason}`,
    refused
      ? 'Check the user, password and database name in the URL, and that this user may connect to that database.'
      : 'Check the URL (host, port, user, password, database) and that the server is up and reachable from this process; to wait longer, raise readyTimeout.',
  );
}
