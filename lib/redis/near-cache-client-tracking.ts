import { settleWithin, type NearCacheClient } from './near-cache-connection.js';

/**
 * Clients whose connection carries one near cache's `OPTIN` tracking. Redis keeps one
 * tracking setting per connection: a second near cache on the same client tracks in
 * `BCAST` mode on its own connection instead of redirecting the first one's messages.
 */
const CLAIMED = new WeakMap<object, object>();

/** The user's ioredis client as `OPTIN` tracking drives it: `call` on its one connection, its events. */
interface TrackableClient extends NearCacheClient {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  readonly status?: string;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  removeListener(event: string, listener: (...args: unknown[]) => void): unknown;
  readonly options?: { readonly keyPrefix?: string; readonly sentinels?: unknown };
}

/**
 * Redis's default-mode client-side caching on the **user's own connection**, with
 * `OPTIN`: `CLIENT TRACKING ON REDIRECT <tracking connection> OPTIN`. Redis then tracks
 * only the keys read by a command sent right after `CLIENT CACHING yes` (the near
 * cache's claims of keys it means to cache, `RedisScriptRunner.runTracked`), and sends
 * the invalidation of such a key, once, when any connection writes it, this one
 * included. A first execution (a claim and a completion of a key nobody tracks) costs
 * the instance no invalidation at all, where `BCAST` mode sends every instance one per
 * write under the prefix, its own writes included. The application's other reads on
 * that client are not tracked.
 *
 * Used with a standalone ioredis client that no other near cache tracks on and that has
 * no tracking of its own; otherwise (node-redis, Sentinel, Redis before 6.2) the near
 * cache tracks in `BCAST` mode on its own connection. Tracking ends with the user's
 * connection: it is armed again and proven after every reconnection (`NearCacheTracking`).
 */
export class ClientTracking {
  private constructor(
    private readonly client: TrackableClient,
    private readonly owner: object,
  ) {}

  /** The `OPTIN` tracking of `client` for `owner`, or undefined when `client` cannot carry it. */
  static for(client: NearCacheClient, owner: object): ClientTracking | undefined {
    const trackable = client as Partial<TrackableClient>;
    if (typeof trackable.call !== 'function' || typeof trackable.duplicate !== 'function') return undefined;
    if (typeof trackable.on !== 'function' || typeof trackable.removeListener !== 'function') return undefined;
    // node-redis's adapter opens its own connections; a Sentinel client may reconnect to another server than the tracking connection.
    if (typeof client.openTrackingConnection === 'function' || trackable.options?.sentinels) return undefined;
    return new ClientTracking(trackable as TrackableClient, owner);
  }

  /**
   * Whether tracking may go on the client now: no other near cache claimed it and Redis
   * reports no tracking of the application's own on the connection (a tracking left by
   * this owner's earlier session is its own). Claims the client for the owner.
   */
  async available(): Promise<boolean> {
    const holder = CLAIMED.get(this.client);
    if (holder !== undefined && holder !== this.owner) return false;
    let info: TrackingInfo;
    try {
      info = parseTrackingInfo(await this.client.call('CLIENT', 'TRACKINGINFO'));
    } catch (error) {
      // Redis before 6.2 (no TRACKINGINFO) or a proxy that refuses it: BCAST on the near
      // cache's own connection. A client that is down is asked again once it is back.
      if (!this.connected() || !isRefusal(error)) throw error;
      return false;
    }
    if (info.flags.includes('on') && holder !== this.owner) return false;
    CLAIMED.set(this.client, this.owner);
    return true;
  }

  /** Turns tracking on for the client's connection, its messages redirected to `redirectId`. */
  async arm(redirectId: number): Promise<void> {
    await this.client.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', redirectId, 'OPTIN');
  }

  /**
   * True while the client's connection still tracks as armed: `OPTIN` on, redirected to
   * `redirectId`, the redirection not broken. Anything else (a reconnection, a `CLIENT
   * TRACKING` or `RESET` sent by the application) and the cache must stop answering.
   */
  async check(redirectId: number): Promise<boolean> {
    const info = parseTrackingInfo(await this.client.call('CLIENT', 'TRACKINGINFO'));
    return (
      info.redirect === redirectId && info.flags.includes('on') && info.flags.includes('optin') && !info.flags.includes('broken_redirect')
    );
  }

  /** False while the client's connection is down (reconnecting, closed). */
  connected(): boolean {
    return this.client.status === undefined || this.client.status === 'ready';
  }

  /** A tracked read of `key` (right after `CLIENT CACHING yes`), for the proof of delivery. */
  async readTracked(key: string): Promise<void> {
    const caching = this.client.call('CLIENT', 'CACHING', 'yes');
    const read = this.client.eval(`return redis.call('GET', KEYS[1])`, 1, key);
    await Promise.all([caching, read]);
  }

  /** Listens to the client's connection events (`close`, `reconnecting`, `end`, `ready`); returns the remover. */
  watch(lost: () => void, ready: () => void): () => void {
    const events: [string, () => void][] = [
      ['close', lost],
      ['reconnecting', lost],
      ['end', lost],
      ['ready', ready],
    ];
    for (const [event, listener] of events) this.client.on(event, listener);
    return () => {
      for (const [event, listener] of events) this.client.removeListener(event, listener);
    };
  }

  /**
   * Tracking off on the client (best effort, while connected, waiting at most `timeout`
   * ms) and the client released for another near cache.
   */
  async release(timeout: number): Promise<void> {
    if (CLAIMED.get(this.client) !== this.owner) return;
    CLAIMED.delete(this.client);
    if (this.client.status !== 'ready') return;
    await settleWithin(
      Promise.resolve().then(() => this.client.call('CLIENT', 'TRACKING', 'OFF')),
      timeout,
    );
  }
}

/** An error reply of Redis (or of a proxy) to the command itself, not a lost connection or a timeout. */
function isRefusal(error: unknown): boolean {
  return error instanceof Error && /^(ERR|NOPERM|WRONGTYPE)\b|unknown (sub)?command/i.test(error.message);
}

interface TrackingInfo {
  readonly flags: readonly string[];
  readonly redirect: number;
}

/** `CLIENT TRACKINGINFO`'s reply: a flat `[name, value, …]` list over RESP2, a map over RESP3. */
function parseTrackingInfo(reply: unknown): TrackingInfo {
  const fields = new Map<string, unknown>();
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), reply[i + 1]);
  } else if (reply instanceof Map) {
    for (const [name, value] of reply) fields.set(String(name), value);
  } else if (reply !== null && typeof reply === 'object') {
    for (const [name, value] of Object.entries(reply)) fields.set(name, value);
  }
  const flags = fields.get('flags');
  return {
    flags: Array.isArray(flags) ? flags.map(String) : [],
    redirect: Number(fields.get('redirect') ?? -1),
  };
}
