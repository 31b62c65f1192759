import { NearCacheClock } from './near-cache-clock.js';
import { NearCacheDbIdentity } from './near-cache-db-identity.js';
import {
  openTrackingConnection,
  quitConnection,
  withTimeout,
  type NearCacheClient,
  type TrackingConnection,
} from './near-cache-connection.js';
import { proveRedirected, proveSelf, type ProbeContext } from './near-cache-proof.js';
import { NearCacheArming, TrackingNotEligibleError } from './near-cache-arming.js';
import { NearCacheInvalidations, type TrackedCache } from './near-cache-invalidations.js';

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;
/**
 * How often the tracking connection is pinged while the cache answers: a connection that
 * died without a close (a network partition) is noticed within this plus the timeout,
 * not only by `maxAge`.
 */
const HEARTBEAT_MS = 5_000;
/** Every this many heartbeats (5 min), the clocks are compared again, so the drift allowance stays small. */
const CLOCK_EVERY_HEARTBEATS = 60;
const INVALIDATE_CHANNEL = '__redis__:invalidate';
/** Proofs in a row that may fail in the redirect design (a timeout, say) before the store falls back to the self-redirected one. */
const MAX_REDIRECT_FAILURES = 3;

/**
 * The near cache's dedicated connection to Redis: one RESP2 connection subscribed to
 * `__redis__:invalidate`, on which Redis reports every write, delete and expiry of a
 * cached record by any other connection, so the cache drops that key. Two designs:
 *
 * - **redirect** (ioredis standalone, `NearCacheArming`): tracking is switched on on the
 *   user's connection, the one that reads and writes the records, `CLIENT TRACKING ON
 *   REDIRECT <this connection> NOLOOP`. Redis then reports only keys that connection
 *   read, and none of its own writes: a first execution costs no message, so no instance
 *   pays for its own writes. Proven by `CLIENT TRACKINGINFO` read through the user's
 *   client (on, noloop, redirect to this connection) and by a probe key read through the
 *   user's client and written by another, short-lived connection, whose invalidation must
 *   arrive. Re-armed and re-proven whenever either connection is new; the heartbeat reads
 *   `TRACKINGINFO` again.
 * - **self** (every other case, see `NearCacheArming.eligible` and `fallBack`): this
 *   connection tracks for itself, `CLIENT TRACKING ON REDIRECT <itself> BCAST PREFIX
 *   <prefix>`, hearing every write under the prefix, this instance's too. Proven by a
 *   probe key written through the user's client.
 *
 * The cache answers only once delivery is proven on the current connections, and is
 * switched off (emptied) on any trouble: error, close, reconnection of either
 * connection, a heartbeat unanswered. It also keeps the Redis clock (compared with
 * `TIME` when tracking starts, then every 5 minutes), by which entries expire no later
 * than their record, and reads the database's identity with every heartbeat, as
 * `SWAPDB` sends no invalidation (`NearCacheDbIdentity`).
 */
export class NearCacheTracking {
  /**
   * Bumped on every disabling only: what a proof, heartbeat or sync started under another
   * session no longer applies. An emptying (a flush) is no such event: a proof or
   * heartbeat under way when a flush arrives still counts.
   */
  private session = 0;
  private readonly identity: NearCacheDbIdentity;
  private identityInFlight = false;
  /** Reads the channel's messages; its `count` is the stats' `invalidations`. */
  readonly invalidations: NearCacheInvalidations;
  private started = false;
  private closed = false;
  private connection: TrackingConnection | undefined;
  /** The connection subscribed to the channel, with its `CLIENT ID`, once `track` set it up. */
  private subscribed: { readonly connection: TrackingConnection; readonly id: number } | undefined;
  /** The user's client's side in the redirect design; undefined in the self design. */
  private arming: NearCacheArming | undefined;
  private redirectFailures = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private heartbeatInFlight = false;
  private heartbeats = 0;
  private retryDelay = FIRST_RETRY_MS;
  /** The Redis clock, by which the cache's entries expire no later than their record. */
  readonly clock: NearCacheClock;
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
    this.invalidations = new NearCacheInvalidations(this.trackedPrefix, cache);
  }

  /** `'redirect'` or `'self'` (see the class); `'self'` until the redirect design is taken. */
  get design(): 'redirect' | 'self' {
    return this.arming === undefined ? 'self' : 'redirect';
  }

  /** Opens the dedicated connection (once); the cache answers once tracking is proven. */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    if (NearCacheArming.eligible(this.client)) {
      const arming = new NearCacheArming(
        this.client,
        this.probeTimeout,
        () => this.disable(),
        () => this.onClientReady(),
      );
      // A second store on the same client keeps the self design: a connection has one redirect target.
      if (arming.acquire()) this.arming = arming;
    }
    this.open();
  }

  /** Closes the dedicated connection for good; the store keeps working without the cache. */
  async close(): Promise<void> {
    this.closed = true;
    this.disable();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopHeartbeat();
    const arming = this.arming;
    this.arming = undefined;
    // Tracking off on the user's connection first, while its redirect target still exists.
    await arming?.release();
    const connection = this.connection;
    this.connection = undefined;
    this.subscribed = undefined;
    if (!connection) return;
    connection.removeAllListeners('messageBuffer');
    await quitConnection(connection, this.probeTimeout);
  }

  private disable(): void {
    this.session++;
    this.clientId = undefined;
    this.identity.reset();
    this.cache.disable();
  }

  /** The user's connection is (again) ready: its tracking is gone with the old one, arm and prove anew. */
  private onClientReady(): void {
    if (this.closed) return;
    this.disable();
    void this.prove();
  }

  private open(): void {
    if (this.closed) return;
    const connection = openTrackingConnection(this.client);
    this.connection = connection;
    const lost = () => {
      if (this.connection !== connection) return;
      this.subscribed = undefined;
      this.disable();
    };
    connection.on('close', lost);
    connection.on('reconnecting', lost);
    connection.on('end', () => {
      if (this.connection !== connection) return;
      lost();
      // The client's retryStrategy gave up: start over later on a new connection.
      this.reopenLater(connection);
    });
    connection.on('error', (error: unknown) => {
      if (this.connection !== connection) return;
      lost();
      this.report(error, 'the near cache connection failed; the cache answers nothing until its invalidations are proven again');
      // Still connected after an error: reconnect, so that tracking is set up and proven again.
      if (connection.status === 'ready') connection.disconnect(true);
    });
    connection.on('ready', () => {
      if (this.connection === connection) void this.track(connection);
    });
    connection.on('messageBuffer', (_channel: unknown, message: unknown) => {
      if (this.connection === connection) this.invalidations.onMessage(message);
    });
    connection.connect().catch(() => {
      // Reported through 'error'; the client's retryStrategy (or reopenLater) tries again.
    });
    this.startHeartbeat(connection);
  }

  /**
   * While the cache answers, every HEARTBEAT_MS: a PING on the tracking connection (no
   * answer within the timeout means the connection is gone), a read of the database's
   * identity (a SWAPDB sends no invalidation) and, in the redirect design, `CLIENT
   * TRACKINGINFO` on the user's connection (tracking still on, to this connection).
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
      const id = this.subscribed?.id;
      const arming = this.arming;
      const tracked = arming === undefined || id === undefined ? Promise.resolve() : arming.verify(id);
      Promise.all([
        this.ping(connection, session),
        tracked.catch((error: unknown) => this.lostTracking(connection, session, error)),
      ]).finally(() => {
        this.heartbeatInFlight = false;
      });
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /** The user's connection no longer tracks as proven: off, and set up and proven again. */
  private lostTracking(connection: TrackingConnection, session: number, error: unknown): void {
    if (this.connection !== connection || this.session !== session || this.closed) return;
    this.disable();
    this.report(error, "the client's connection no longer tracks for the near cache; it answers nothing until proven again");
    void this.prove();
  }

  /**
   * A PING on the tracking connection. Redis answers it after every invalidation it queued
   * to that connection before, and the client handles replies in order, so once it
   * resolves, those invalidations have been applied. Unanswered within the timeout, or
   * failed: the connection is taken as lost (switched off, emptied, reconnected).
   */
  private async ping(connection: TrackingConnection, session: number): Promise<void> {
    try {
      await withTimeout(
        connection.call('PING'),
        this.probeTimeout,
        `the near cache connection did not answer PING within ${this.probeTimeout} ms`,
      );
    } catch (error) {
      if (this.connection !== connection || this.session !== session || this.closed) return;
      this.disable();
      this.report(error, 'the near cache connection stopped answering; the cache answers nothing until it is reconnected and proven again');
      connection.disconnect(true);
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
    try {
      const verdict = await withTimeout(this.identity.read(), this.probeTimeout, 'the identity read did not answer in time');
      if (this.session !== session || verdict === 'outdated') return true;
      if (verdict === 'changed') this.cache.clear();
      this.cache.extendIdentity(sentAt + HEARTBEAT_MS + this.probeTimeout);
      return true;
    } catch {
      return false;
    } finally {
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

  /** On every `ready` of the tracking connection: its id, the clocks, tracking on itself (self design), subscribed; then `prove`. */
  private async track(connection: TrackingConnection): Promise<void> {
    this.subscribed = undefined;
    this.disable();
    const current = () => this.connection === connection && !this.closed;
    try {
      const id = Number(await connection.call('CLIENT', 'ID'));
      const before = performance.now();
      const time = (await connection.call('TIME')) as unknown[];
      const after = performance.now();
      if (this.arming === undefined) {
        const prefixArgs = this.trackedPrefix === '' ? [] : ['PREFIX', this.trackedPrefix];
        await connection.call('CLIENT', 'TRACKING', 'ON', 'REDIRECT', id, 'BCAST', ...prefixArgs);
      }
      await connection.subscribe(INVALIDATE_CHANNEL);
      if (!current()) return;
      this.clock.set(time, before, after);
      this.subscribed = { connection, id };
    } catch (error) {
      if (!current()) return;
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(connection);
      return;
    }
    await this.prove();
  }

  /**
   * Arms tracking on the user's connection (redirect design) and proves delivery on the
   * connections of now, reads the database's identity, then lets the cache answer. Any
   * step that finds the session changed (either connection lost meanwhile) stops: the
   * event that changed it starts a new proof.
   */
  private async prove(): Promise<void> {
    const subscribed = this.subscribed;
    if (subscribed === undefined || this.closed) return;
    const { connection, id } = subscribed;
    const session = this.session;
    const current = () => this.subscribed === subscribed && this.session === session && !this.closed;
    const arming = this.arming;
    try {
      if (arming !== undefined) {
        // Not ready: its `ready` proves again.
        if (!arming.ready) return;
        await arming.arm(id, current);
        if (!current()) return;
        await proveRedirected(this.probeContext(current), arming, id);
      } else {
        await proveSelf(this.probeContext(current));
      }
      if (!current()) return;
      // The database the cache is filled from, known before anything is cached.
      const sentAt = performance.now();
      await this.identity.read();
      if (!current()) return;
      this.clientId = id;
      this.retryDelay = FIRST_RETRY_MS;
      this.redirectFailures = 0;
      this.cache.enable(sentAt + HEARTBEAT_MS + this.probeTimeout);
    } catch (error) {
      if (!current()) return;
      if (arming !== undefined && (error instanceof TrackingNotEligibleError || ++this.redirectFailures >= MAX_REDIRECT_FAILURES)) {
        this.fallBack(arming, connection, error);
        return;
      }
      this.report(error, 'the near cache could not switch on invalidation tracking; it answers nothing and tries again later');
      this.reopenLater(connection);
    }
  }

  private probeContext(current: () => boolean): ProbeContext {
    const { client, prefix, keyPrefix, invalidations, probeTimeout: timeout } = this;
    return { client, prefix, keyPrefix, invalidations, timeout, current };
  }

  /** To the self design for good: tracking already on there for someone else, `CLIENT TRACKING(INFO)` refused, or repeated failures. */
  private fallBack(arming: NearCacheArming, connection: TrackingConnection, error: unknown): void {
    this.arming = undefined;
    this.subscribed = undefined;
    this.disable();
    void arming.release();
    this.report(error, 'the near cache tracks its own writes too (self-redirected design), as tracking on the client could not be used');
    // Subscribed already: a new connection, on which `track` switches tracking on itself first.
    if (connection.status === 'ready') connection.disconnect(true);
    else this.reopenLater(connection);
  }
}
