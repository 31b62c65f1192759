import { randomUUID } from 'node:crypto';
import { NearCacheClock } from './near-cache-clock.js';
import { NearCacheDbIdentity } from './near-cache-db-identity.js';
import { openTrackingConnection, quitConnection, type NearCacheClient, type TrackingConnection } from './near-cache-connection.js';
import { InvalidationMessages, type InvalidatedCache } from './near-cache-invalidations.js';
import { ClientTracking } from './near-cache-client-tracking.js';
import type { NearCacheTrackingMode } from './near-cache-options.js';

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
export interface TrackedCache extends InvalidatedCache {
  /** True while the cache answers. */
  readonly enabled: boolean;
  /** Delivery is proven and the database known: answer until `identityValidUntil` (`performance.now()` ms). */
  enable(identityValidUntil: number, mode: NearCacheTrackingMode): void;
  /** Answer nothing and empty the cache, until `enable` again. */
  disable(): void;
  /** The database's identity was read unchanged: entries may be answered until `until`, if later. */
  extendIdentity(until: number): void;
}

/**
 * The near cache's dedicated connection to Redis: one RESP2 connection subscribed to
 * `__redis__:invalidate`, where Redis sends the invalidations of (`'client'` mode) the
 * keys the user's client read tracked, its `OPTIN` tracking redirected here
 * (`ClientTracking`), or (`'broadcast'` mode, `CLIENT TRACKING ... BCAST PREFIX
 * <prefix>` on this connection) every key under the store's prefix; it tells the cache
 * to drop them.
 *
 * It switches the cache on only once delivery of those messages is proven on the
 * current connections (a probe key written through the user's client must come back as
 * an invalidation), and off (emptied) on any trouble: error, close, reconnection of this
 * connection (or, in `'client'` mode, of the client's), a heartbeat PING unanswered, the
 * client's tracking found changed. It also keeps the Redis clock (compared with
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
  private readonly messages: InvalidationMessages;
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
  /** The dedicated connection's `CLIENT ID` while the cache answers (tests). */
  clientId: number | undefined;
  private readonly probeTimeout: number;
  /** `OPTIN` tracking on the user's client (`'client'` mode), when the client can carry it. */
  private readonly clientTracking: ClientTracking | undefined;
  private unwatchClient: (() => void) | undefined;
  /** The dedicated connection once subscribed, its `CLIENT ID` and the mode chosen for it, until it is lost. */
  private subscription: { readonly connection: TrackingConnection; readonly id: number; readonly mode: NearCacheTrackingMode } | undefined;

  constructor(
    private readonly client: NearCacheClient,
    private readonly prefix: string,
    private readonly cache: TrackedCache,
    timeout: number,
    private readonly report: (error: unknown, reason: string) => void,
  ) {
    this.messages = new InvalidationMessages(client.options?.keyPrefix ?? '', prefix, cache);
    this.probeTimeout = timeout > 0 ? timeout : 2_000;
    this.identity = new NearCacheDbIdentity(client, prefix);
    this.clock = new NearCacheClock(client, this.probeTimeout);
    this.clientTracking = ClientTracking.for(client, this);
  }

  /** Opens the dedicated connection (once); the cache answers once tracking is proven. */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.unwatchClient = this.clientTracking?.watch(
      () => {
        // The client's connection, and the tracking on it, is gone: nothing it read is tracked any more.
        if (this.subscription?.mode === 'client') this.disable();
      },
      () => {
        if (this.subscription?.mode === 'client') this.restartProof();
      },
    );
    this.open();
  }

  /** Closes the dedicated connection for good; the store keeps working without the cache. */
  async close(): Promise<void> {
    this.closed = true;
    this.disable();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopHeartbeat();
    this.unwatchClient?.();
    if (this.subscription?.mode === 'client') await this.clientTracking?.release(this.probeTimeout);
    this.subscription = undefined;
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    connection.removeAllListeners('messageBuffer');
    await quitConnection(connection, this.probeTimeout);
  }

  /** Invalidation messages heard, keys and flushes (stats). */
  get invalidations(): number {
    return this.messages.count;
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
      if (this.connection !== connection) return;
      this.subscription = undefined;
      this.disable();
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
      if (this.connection === connection) this.messages.handle(message);
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
      const [verdict, armed] = await Promise.race([Promise.all([this.identity.read(), this.clientStillTracks()]), late]);
      if (this.session !== session || verdict === 'outdated') return true;
      if (!armed) {
        this.report(
          new Error("CLIENT TRACKINGINFO no longer shows the near cache's tracking on the client passed in"),
          'the client passed in stopped tracking for the near cache (a CLIENT TRACKING or RESET sent on it?); the cache answers nothing until tracking is armed and proven again',
        );
        this.restartProof();
        return true;
      }
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

  /** `'client'` mode: whether the user's client still tracks as armed (true in `'broadcast'` mode). */
  private clientStillTracks(): Promise<boolean> {
    const subscription = this.subscription;
    if (subscription?.mode !== 'client') return Promise.resolve(true);
    return this.clientTracking!.check(subscription.id);
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

  /**
   * On every `ready` of the dedicated connection: the clocks compared, the mode chosen
   * (`'client'` when the user's client can carry `OPTIN` tracking, else `BCAST` on this
   * connection), subscribed; then tracking is armed and proven (`restartProof`).
   */
  private async track(connection: TrackingConnection): Promise<void> {
    this.disable();
    this.subscription = undefined;
    // Only this connection's loss ends this set-up; the client's is handled by restartProof.
    const current = () => this.connection === connection && !this.closed;
    try {
      const id = Number(await connection.call('CLIENT', 'ID'));
      const before = performance.now();
      const time = (await connection.call('TIME')) as unknown[];
      const after = performance.now();
      const mode: NearCacheTrackingMode = (await this.clientTracking?.available()) ? 'client' : 'broadcast';
      if (mode === 'broadcast') {
        const tracked = this.messages.trackedPrefix;
        const prefixArgs = tracked === '' ? [] : ['PREFIX', tracked];
        await connection.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', id, 'BCAST', ...prefixArgs);
      }
      await connection.subscribe(INVALIDATE_CHANNEL);
      if (!current()) return;
      this.clock.set(time, before, after);
      this.subscription = { connection, id, mode };
    } catch (error) {
      if (!current()) return;
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(connection);
      return;
    }
    this.restartProof();
  }

  /**
   * Switches the cache off, then (`'client'` mode) arms tracking on the user's client,
   * proves delivery and reads the database's identity; then the cache answers. Run after
   * the dedicated connection subscribed, after every reconnection of the user's client
   * (`'client'` mode), and when a heartbeat finds the client's tracking changed.
   */
  private restartProof(): void {
    const subscription = this.subscription;
    if (subscription === undefined || this.closed) return;
    this.disable();
    const session = this.session;
    const current = () => this.subscription === subscription && this.session === session && !this.closed;
    this.prove(subscription.id, subscription.mode, current).catch((error: unknown) => {
      if (!current()) return;
      // The client is reconnecting: its 'ready' proves again.
      if (subscription.mode === 'client' && this.clientTracking?.connected() === false) return;
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(subscription.connection);
    });
  }

  private async prove(id: number, mode: NearCacheTrackingMode, current: () => boolean): Promise<void> {
    if (mode === 'client') await this.clientTracking!.arm(id);
    if (!current()) return;
    await this.proveDelivery(current, mode);
    if (!current()) return;
    // The database the cache is filled from, known before anything is cached.
    const sentAt = performance.now();
    await this.identity.read();
    if (!current()) return;
    this.clientId = id;
    this.retryDelay = FIRST_RETRY_MS;
    this.cache.enable(sentAt + HEARTBEAT_MS + this.probeTimeout, mode);
  }

  /**
   * Writes a probe key under the prefix through the user's client and waits for its
   * invalidation: proof that this connection hears the writes of every connection
   * (`'broadcast'`), or of every write of a key the client read tracked (`'client'`: the
   * probe is read tracked first, and written by the client itself).
   */
  private async proveDelivery(current: () => boolean, mode: NearCacheTrackingMode): Promise<void> {
    const key = `${this.prefix}__near-cache-probe__:${randomUUID()}`;
    const probe = this.messages.awaitProbe(key, this.probeTimeout);
    try {
      if (mode === 'client') await this.clientTracking!.readTracked(key);
      await this.client.eval(`return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])`, 1, key, PROBE_TTL_MS);
      if (!current()) return;
      await probe.seen;
    } finally {
      probe.cancel();
      this.client.eval(`return redis.call('DEL', KEYS[1])`, 1, key).catch(() => undefined);
    }
  }
}
