import { randomUUID } from 'node:crypto';
import { NearCacheClock } from './near-cache-clock.js';
import { NearCacheDbIdentity } from './near-cache-db-identity.js';
import { openTrackingConnection, type NearCacheClient, type TrackingConnection } from './near-cache-connection.js';

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;
const PROBE_TTL_MS = 5_000;
/**
 * How often the tracking connection is pinged while the cache answers: a connection that
 * died without a close (a network partition) is noticed within this plus the timeout,
 * not only by `maxAge`.
 */
const HEARTBEAT_MS = 5_000;
/** Every this many heartbeats (5 min), the clocks are compared again, so the drift allowance stays small. */
const CLOCK_EVERY_HEARTBEATS = 60;
const INVALIDATE_CHANNEL = '__redis__:invalidate';

/**
 * What the tracking connection drives in the near cache: whether it answers, until when,
 * and what it must drop. Every call is synchronous.
 */
export interface TrackedCache {
  /** True while the cache answers. */
  readonly enabled: boolean;
  /** Delivery is proven and the database known: answer until `identityValidUntil` (`performance.now()` ms). */
  enable(identityValidUntil: number): void;
  /** Answer nothing and empty the cache, until `enable` again. */
  disable(): void;
  /** Empty the cache and keep every read in flight from inserting; answering goes on. */
  clear(): void;
  /** The database's identity was read unchanged: entries may be answered until `until`, if later. */
  extendIdentity(until: number): void;
  /** The record under `key` changed in Redis (written, deleted, expired): drop it. */
  invalidate(key: string): void;
}

/**
 * The near cache's dedicated connection to Redis: one RESP2 connection in `CLIENT
 * TRACKING ... BCAST PREFIX <prefix>` mode redirected to itself and subscribed to
 * `__redis__:invalidate`, which hears of every write, delete and expiry of a key under
 * the store's prefix, from any instance, and tells the cache to drop that key.
 *
 * It switches the cache on only once delivery of those messages is proven on the
 * current connection (a probe key written through the user's client must come back as
 * an invalidation), and off (emptied) on any trouble on that connection: error, close,
 * reconnection, a heartbeat PING unanswered. It also keeps the Redis clock (compared with
 * `TIME` when tracking starts, then every 5 minutes), by which entries expire no later
 * than their record, and reads the database's identity with every heartbeat, as
 * `SWAPDB` sends no invalidation (`NearCacheDbIdentity`).
 */
export class NearCacheTracking {
  /**
   * Bumped on every disabling only: what a tracking set-up, heartbeat or sync started
   * under another session no longer applies. An emptying (a flush) is no such event: a
   * proof or heartbeat under way when a flush arrives still counts.
   */
  private session = 0;
  private readonly identity: NearCacheDbIdentity;
  private identityInFlight = false;
  /** Invalidation messages heard, keys and flushes (stats). */
  invalidations = 0;
  private started = false;
  private closed = false;
  private connection: TrackingConnection | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private heartbeatInFlight = false;
  private heartbeats = 0;
  private retryDelay = FIRST_RETRY_MS;
  /** The Redis clock, by which the cache's entries expire no later than their record. */
  readonly clock: NearCacheClock;
  private probe: { readonly key: string; readonly seen: () => void } | undefined;
  /** The user's client's ioredis `keyPrefix`, which it puts before every key it sends. */
  private readonly keyPrefix: string;
  /** Redis keys as invalidation messages name them: the client's keyPrefix, then the store's prefix. */
  private readonly trackedPrefix: string;
  /** The dedicated connection's `CLIENT ID` while the cache answers (tests). */
  clientId: number | undefined;
  private readonly probeTimeout: number;

  constructor(
    private readonly client: NearCacheClient,
    private readonly prefix: string,
    private readonly cache: TrackedCache,
    timeout: number,
    private readonly report: (error: unknown, reason: string) => void,
  ) {
    this.keyPrefix = client.options?.keyPrefix ?? '';
    this.trackedPrefix = this.keyPrefix + prefix;
    this.probeTimeout = timeout > 0 ? timeout : 2_000;
    this.identity = new NearCacheDbIdentity(client, prefix);
    this.clock = new NearCacheClock(client, this.probeTimeout);
  }

  /** Opens the dedicated connection (once); the cache answers once tracking is proven. */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.open();
  }

  /** Closes the dedicated connection for good; the store keeps working without the cache. */
  async close(): Promise<void> {
    this.closed = true;
    this.disable();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopHeartbeat();
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    connection.removeAllListeners('messageBuffer');
    if (connection.status !== 'ready') {
      connection.disconnect();
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        connection.quit(),
        new Promise((resolve) => {
          timer = setTimeout(resolve, this.probeTimeout);
          timer.unref();
        }),
      ]);
    } catch {
      // Closed anyway below.
    } finally {
      clearTimeout(timer);
      connection.disconnect();
    }
  }

  private disable(): void {
    this.session++;
    this.clientId = undefined;
    this.identity.reset();
    this.cache.disable();
  }

  private open(): void {
    if (this.closed) return;
    const connection = openTrackingConnection(this.client);
    this.connection = connection;
    const lost = () => {
      if (this.connection === connection) this.disable();
    };
    connection.on('close', lost);
    connection.on('reconnecting', lost);
    connection.on('end', () => {
      if (this.connection !== connection) return;
      this.disable();
      // The client's retryStrategy gave up: start over later on a new connection.
      this.reopenLater(connection);
    });
    connection.on('error', (error: unknown) => {
      if (this.connection !== connection) return;
      this.disable();
      this.report(error, 'the near cache connection failed; the cache answers nothing until its invalidations are proven again');
      // Still connected after an error: reconnect, so that tracking is set up and proven again.
      if (connection.status === 'ready') connection.disconnect(true);
    });
    connection.on('ready', () => {
      if (this.connection === connection) void this.track(connection);
    });
    connection.on('messageBuffer', (_channel: unknown, message: unknown) => {
      if (this.connection === connection) this.onInvalidation(message);
    });
    connection.connect().catch(() => {
      // Reported through 'error'; the client's retryStrategy (or reopenLater) tries again.
    });
    this.startHeartbeat(connection);
  }

  /**
   * While the cache answers, every HEARTBEAT_MS: a PING on the tracking connection (no
   * answer within the timeout means the connection is gone) and a read of the database's
   * identity (a SWAPDB sends no invalidation).
   */
  private startHeartbeat(connection: TrackingConnection): void {
    this.stopHeartbeat();
    this.heartbeat = setInterval(() => {
      if (!this.cache.enabled || this.connection !== connection) return;
      const session = this.session;
      void this.checkIdentity(session);
      if (this.heartbeatInFlight) return;
      this.heartbeatInFlight = true;
      if (++this.heartbeats % CLOCK_EVERY_HEARTBEATS === 0) void this.clock.compare(() => this.session === session);
      this.ping(connection, session).finally(() => {
        this.heartbeatInFlight = false;
      });
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /**
   * A PING on the tracking connection. Redis answers it after every invalidation it queued
   * to that connection before, and the client handles replies in order, so once it
   * resolves, those invalidations have been applied. Unanswered within the timeout, or
   * failed: the connection is taken as lost (switched off, emptied, reconnected).
   */
  private async ping(connection: TrackingConnection, session: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the near cache connection did not answer PING within ${this.probeTimeout} ms`)),
        this.probeTimeout,
      );
      timer.unref();
    });
    try {
      await Promise.race([connection.call('PING'), late]);
    } catch (error) {
      if (this.connection !== connection || this.session !== session || this.closed) return;
      this.disable();
      this.report(error, 'the near cache connection stopped answering; the cache answers nothing until it is reconnected and proven again');
      connection.disconnect(true);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Reads the database's identity through the user's client: changed (a SWAPDB, or a
   * flush whose invalidation has not arrived) empties the cache; unchanged lets entries be
   * answered for a heartbeat plus the timeout after the read was sent, time for the next
   * read to come back. A failed read extends nothing, so answering stops when that runs
   * out. Returns false when the read failed.
   */
  private async checkIdentity(session: number, force = false): Promise<boolean> {
    // One heartbeat read at a time; a sync() sends its own, as it must be sent after the call.
    if (this.identityInFlight && !force) return true;
    if (!force) this.identityInFlight = true;
    const sentAt = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('the identity read did not answer in time')), this.probeTimeout);
        timer.unref();
      });
      const verdict = await Promise.race([this.identity.read(), late]);
      if (this.session !== session || verdict === 'outdated') return true;
      if (verdict === 'changed') this.cache.clear();
      this.cache.extendIdentity(sentAt + HEARTBEAT_MS + this.probeTimeout);
      return true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      if (!force) this.identityInFlight = false;
    }
  }

  /**
   * Resolves once the cache reflects every write, delete, flush and SWAPDB that Redis ran
   * before the call: a PING on the tracking connection (see `ping`) and a read of the
   * database's identity, sent together. What cannot be confirmed is dropped: a failed
   * PING switches the cache off, a failed identity read empties it. Never rejects.
   */
  async sync(): Promise<void> {
    const connection = this.connection;
    if (!this.cache.enabled || connection === undefined) return;
    const session = this.session;
    const [, confirmed] = await Promise.all([this.ping(connection, session), this.checkIdentity(session, true)]);
    if (!confirmed && this.session === session) this.cache.clear();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    this.heartbeatInFlight = false;
  }

  private reopenLater(connection: TrackingConnection): void {
    if (this.closed || this.retryTimer) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(MAX_RETRY_MS, this.retryDelay * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.closed || this.connection !== connection) return;
      this.stopHeartbeat();
      connection.removeAllListeners();
      connection.on('error', () => undefined);
      connection.disconnect();
      this.open();
    }, delay);
    this.retryTimer.unref();
  }

  /** On every `ready`: tracking on, subscribed, clocks compared, delivery proven; then answering starts. */
  private async track(connection: TrackingConnection): Promise<void> {
    this.disable();
    const session = this.session;
    const current = () => this.connection === connection && this.session === session && !this.closed;
    try {
      const id = Number(await connection.call('CLIENT', 'ID'));
      const before = performance.now();
      const time = (await connection.call('TIME')) as unknown[];
      const after = performance.now();
      const prefixArgs = this.trackedPrefix === '' ? [] : ['PREFIX', this.trackedPrefix];
      await connection.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', id, 'BCAST', ...prefixArgs);
      await connection.subscribe(INVALIDATE_CHANNEL);
      if (!current()) return;
      await this.proveDelivery(current);
      if (!current()) return;
      // The database the cache is filled from, known before anything is cached.
      const sentAt = performance.now();
      await this.identity.read();
      if (!current()) return;
      this.clock.set(time, before, after);
      this.clientId = id;
      this.retryDelay = FIRST_RETRY_MS;
      this.cache.enable(sentAt + HEARTBEAT_MS + this.probeTimeout);
    } catch (error) {
      if (!current()) return;
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(connection);
    }
  }

  /**
   * Writes a probe key under the prefix through the user's client and waits for its
   * invalidation: proof that this connection hears the writes of every connection.
   */
  private async proveDelivery(current: () => boolean): Promise<void> {
    const key = `${this.prefix}__near-cache-probe__:${randomUUID()}`;
    let timer: NodeJS.Timeout | undefined;
    const seen = new Promise<void>((resolve, reject) => {
      this.probe = { key: this.keyPrefix + key, seen: resolve };
      timer = setTimeout(
        () => reject(new Error(`Redis's invalidation of the probe key did not arrive within ${this.probeTimeout} ms`)),
        this.probeTimeout,
      );
      timer.unref();
    });
    try {
      await this.client.eval(`return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])`, 1, key, PROBE_TTL_MS);
      if (!current()) return;
      await seen;
    } finally {
      clearTimeout(timer);
      this.probe = undefined;
      this.client.eval(`return redis.call('DEL', KEYS[1])`, 1, key).catch(() => undefined);
    }
  }

  private onInvalidation(message: unknown): void {
    if (message === null || message === undefined || (Array.isArray(message) && message.length === 0)) {
      this.invalidations++;
      this.invalidateAll();
      return;
    }
    if (!Array.isArray(message)) {
      this.invalidateKey(message);
      return;
    }
    for (const key of message) this.invalidateKey(key);
  }

  private invalidateKey(raw: unknown): void {
    this.invalidations++;
    if (raw === null || raw === undefined) return this.invalidateAll();
    const redisKey = Buffer.isBuffer(raw) ? raw.toString('utf8') : String(raw);
    if (redisKey === '') return this.invalidateAll();
    if (this.probe !== undefined && redisKey === this.probe.key) this.probe.seen();
    // `<keyPrefix><prefix>{<key>}`: anything else under the prefix is not a record.
    if (!redisKey.startsWith(this.trackedPrefix) || redisKey.charCodeAt(redisKey.length - 1) !== 125 /* } */) return;
    if (redisKey.charCodeAt(this.trackedPrefix.length) !== 123 /* { */) return;
    this.cache.invalidate(redisKey.slice(this.trackedPrefix.length + 1, -1));
  }

  /** FLUSHDB / FLUSHALL (a null payload): everything goes, and no read in flight may insert. */
  private invalidateAll(): void {
    this.cache.clear();
  }
}
