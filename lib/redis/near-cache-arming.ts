import { withTimeout, type NearCacheClient } from './near-cache-connection.js';

/** The user's client (its one connection, ioredis standalone) whose tracking a store armed: one owner per client. */
const owners = new WeakMap<object, NearCacheArming>();

/**
 * Tracking on the user's client refused for a reason that will not go away by retrying
 * (tracking already on for someone else, a Redis that refuses `CLIENT TRACKING` or has
 * no `CLIENT TRACKINGINFO`): the near cache falls back to its self-redirected connection.
 */
export class TrackingNotEligibleError extends Error {
  override readonly name = 'TrackingNotEligibleError';
}

/** `CLIENT TRACKINGINFO`, as RESP2 (a flat array) or RESP3 (a map, an array of pairs or an object) gives it. */
interface TrackingInfo {
  readonly flags: readonly string[];
  readonly redirect: number;
  readonly prefixes: readonly string[];
}

function text(value: unknown): string {
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

function parseTrackingInfo(reply: unknown): TrackingInfo {
  const fields = new Map<string, unknown>();
  if (reply instanceof Map) for (const [name, value] of reply) fields.set(text(name), value);
  else if (Array.isArray(reply)) for (let i = 0; i + 1 < reply.length; i += 2) fields.set(text(reply[i]), reply[i + 1]);
  else if (typeof reply === 'object' && reply !== null) for (const [name, value] of Object.entries(reply)) fields.set(name, value);
  const list = (value: unknown) => (Array.isArray(value) ? value.map(text) : value === undefined || value === null ? [] : [text(value)]);
  return { flags: list(fields.get('flags')), redirect: Number(text(fields.get('redirect') ?? -1)), prefixes: list(fields.get('prefixes')) };
}

/**
 * The user's client's side of the near cache's "redirect" design: `CLIENT TRACKING ON
 * REDIRECT <tracking connection id> NOLOOP` on the connection that writes the records,
 * in Redis's default (not `BCAST`) mode. Redis then reports to the tracking connection a
 * write, delete or expiry of every key this connection read (the claims' reads, which
 * are the only source of cached records) made by any OTHER connection, and nothing of
 * this connection's own writes: a first execution costs no invalidation message, here
 * or in any other instance that never read its key. (`BCAST` + `NOLOOP` is no use: Redis
 * 7 attributes a script's writes to its Lua client, so its own scripts' writes come back.)
 *
 * Only for an ioredis standalone client (one socket, whose loss ioredis announces with
 * `close`): `eligible()` says so. Tracking state lives on that socket: the cache is
 * switched off from the moment it is lost (`close`, `reconnecting`, `end`) until tracking
 * is armed again and proven on the new one (`ready`).
 */
export class NearCacheArming {
  /** The `REDIRECT` id this store set on the current connection, if it did. */
  private armedId: number | undefined;
  private readonly listeners: [string, () => void][];

  constructor(
    private readonly client: NearCacheClient,
    private readonly timeout: number,
    onLost: () => void,
    onReady: () => void,
  ) {
    const lost = () => {
      this.armedId = undefined;
      onLost();
    };
    this.listeners = [
      ['close', lost],
      ['reconnecting', lost],
      ['end', lost],
      ['ready', onReady],
    ];
  }

  /**
   * True for a client whose commands all go on one connection this package can watch:
   * ioredis standalone (it has `call` and a string `status`), not through Sentinel (a
   * failover may leave the tracking connection on another server), not Cluster. The
   * node-redis adapter has no `call`: it keeps the self-redirected design, as node-redis
   * may replace its socket without an event (maintenance handoffs) and its own RESP3
   * client-side cache uses tracking on that connection.
   */
  static eligible(client: NearCacheClient): boolean {
    const sentinels = (client.options as { sentinels?: unknown } | undefined)?.sentinels;
    return (
      typeof client.call === 'function' &&
      typeof client.on === 'function' &&
      typeof client.removeListener === 'function' &&
      typeof client.duplicate === 'function' &&
      typeof client.status === 'string' &&
      client.openTrackingConnection === undefined &&
      client.isCluster !== true &&
      !(Array.isArray(sentinels) && sentinels.length > 0)
    );
  }

  /** Takes the client for this store; false when another store's near cache already did (a connection has one redirect target). */
  acquire(): boolean {
    const owner = owners.get(this.client);
    if (owner !== undefined && owner !== this) return false;
    owners.set(this.client, this);
    for (const [event, listener] of this.listeners) this.client.on!(event, listener);
    return true;
  }

  /** Lets the client go: listeners off, tracking switched off if this store switched it on (not awaited beyond the timeout). */
  async release(): Promise<void> {
    if (owners.get(this.client) !== this) return;
    owners.delete(this.client);
    for (const [event, listener] of this.listeners) this.client.removeListener!(event, listener);
    const armed = this.armedId;
    this.armedId = undefined;
    if (armed === undefined || this.client.status !== 'ready') return;
    try {
      const info = parseTrackingInfo(await this.bounded(this.client.call!('CLIENT', 'TRACKINGINFO')));
      // Switched off only while it still redirects to this store's connection: never someone else's tracking.
      if (info.flags.includes('on') && info.redirect === armed) await this.bounded(this.client.call!('CLIENT', 'TRACKING', 'OFF'));
    } catch {
      // The connection goes, or is gone: its tracking goes with it.
    }
  }

  /** True while the user's client can send commands. */
  get ready(): boolean {
    return this.client.status === 'ready';
  }

  /**
   * Switches tracking on the user's connection to `REDIRECT id NOLOOP`. Refuses
   * (`TrackingNotEligibleError`) when tracking is already on there for anyone else: the
   * user's own, or another near cache's through another copy of this package.
   */
  async arm(id: number, current: () => boolean): Promise<void> {
    const info = await this.info();
    // A proof superseded meanwhile sends nothing more: only the newest one arms the connection.
    if (!current()) return;
    if (info.flags.includes('on')) {
      if (this.armedId === undefined || info.redirect !== this.armedId) {
        throw new TrackingNotEligibleError(
          `CLIENT TRACKING is already on on the client's connection (redirect ${info.redirect}, flags ${info.flags.join(',')})`,
        );
      }
      // Ours, to a tracking connection that is gone: OFF first, so no state of the old target carries over.
      await this.bounded(this.client.call!('CLIENT', 'TRACKING', 'OFF'));
      if (!current()) return;
    }
    this.armedId = id;
    try {
      await this.bounded(this.client.call!('CLIENT', 'TRACKING', 'ON', 'REDIRECT', id, 'NOLOOP'));
    } catch (error) {
      if (isReplyError(error)) throw new TrackingNotEligibleError(`CLIENT TRACKING ON was refused: ${(error as Error).message}`);
      throw error;
    }
  }

  /** Proof (a): the user's connection tracks in the mode this store set, to `id`. Rejects otherwise. */
  async verify(id: number): Promise<void> {
    const info = await this.info();
    const { flags } = info;
    const wanted = flags.includes('on') && flags.includes('noloop') && !flags.includes('bcast') && !flags.includes('broken_redirect');
    if (!wanted || info.redirect !== id || info.prefixes.length > 0) {
      throw new Error(
        `the client's connection does not track as set (redirect ${info.redirect}, flags ${flags.join(',')}), expected ${id}`,
      );
    }
  }

  /**
   * Proof (b): a write of `redisKey` by a connection that is not the user's (with NOLOOP,
   * the user's own write would not be reported). A short-lived duplicate, opened for this
   * proof only, never per request.
   */
  async writeFromElsewhere(redisKey: string, ttl: number): Promise<void> {
    const other = this.client.duplicate!({ lazyConnect: true, keyPrefix: undefined, enableOfflineQueue: true, autoResubscribe: false }) as {
      connect(): Promise<unknown>;
      call(command: string, ...args: (string | number)[]): Promise<unknown>;
      on(event: string, listener: (...args: unknown[]) => void): unknown;
      disconnect(): void;
    };
    other.on('error', () => undefined);
    try {
      await this.bounded(
        (async () => {
          await other.connect();
          await other.call('SET', redisKey, '1', 'PX', ttl);
        })(),
      );
    } finally {
      other.disconnect();
    }
  }

  private async info(): Promise<TrackingInfo> {
    try {
      return parseTrackingInfo(await this.bounded(this.client.call!('CLIENT', 'TRACKINGINFO')));
    } catch (error) {
      // Redis before 6.2 (no TRACKINGINFO), or a proxy that refuses CLIENT: the self-redirected design then.
      if (isReplyError(error)) throw new TrackingNotEligibleError(`CLIENT TRACKINGINFO was refused: ${(error as Error).message}`);
      throw error;
    }
  }

  private bounded<T>(promise: Promise<T>): Promise<T> {
    return withTimeout(promise, this.timeout, `Redis did not answer the near cache's arming within ${this.timeout} ms`);
  }
}

/** An error reply of Redis (ioredis's `ReplyError`), not a lost connection or a timeout. */
function isReplyError(error: unknown): boolean {
  return error instanceof Error && error.name === 'ReplyError';
}
