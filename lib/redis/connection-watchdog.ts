/**
 * Drops a Redis connection that a path stopped carrying, so that the client opens a new
 * one (issue 42). A path that drops every packet without a reset (a NAT or firewall that
 * lost its state, a failover behind a virtual IP) leaves the socket open for the kernel's
 * ~15 minutes: the client keeps writing into it, every call times out, and nothing in the
 * client notices (node-redis has no reply timeout at all; an ioredis client without
 * `socketTimeout` neither).
 *
 * Two signs, both seen from the calls of this package:
 * - a call timed out (the runner's deadline, or the client's own `commandTimeout`) and
 *   nothing has been answered on the client since that call was sent, for `deadAfter`
 *   (the runner's timeout): the connection is silent, not slow;
 * - the client has stayed connected-but-not-ready (its handshake gets no answer) for
 *   `deadAfter`.
 *
 * The drop comes `WRITE_BEHIND_MS` after the timeout is told to the caller: what the
 * caller sends on learning of the failure (the release undoing a claim, a lock's undo) is
 * written on the same connection first, so that, should the server only have been hung,
 * it runs right behind the late command, as without the drop. (One turn of the event loop
 * is not enough: node-redis writes a command a few ticks after it is called.)
 *
 * Then: ioredis `disconnect(true)` (it reconnects by its `retryStrategy` and resends what
 * was unanswered); node-redis, which has no public way to drop a socket and keep the
 * client, `destroy()` then `connect()` on the client (or Cluster): commands waiting on it
 * are rejected, its `end` event fires, and it is open again at once. A client its owner
 * closed is never opened again. One watchdog per client, shared by every runner on it,
 * acts at most once per `deadAfter`.
 */

/** The parts of an ioredis client (`Redis`, `Cluster`) the watchdog reads and drops. */
interface IoredisConnection {
  readonly status?: string;
  disconnect?(reconnect?: boolean): void;
  readonly nodes?: unknown;
}

/** The parts of a node-redis client or Cluster (5 or 6) the watchdog reads and reopens. */
interface NodeRedisConnection {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  destroy?(): unknown;
  connect(): Promise<unknown>;
}

/** What a watchdog did, for the store's log and events. */
export type ConnectionDropListener = (reason: string) => void;

/** How long after the timeout that revealed it a connection is dropped, ms (see above). */
const WRITE_BEHIND_MS = 50;

/** How long a reopen waits for node-redis's own connection loop to see its socket closed, ms. */
const LOOP_EXIT_MS = 100;

const watchdogs = new WeakMap<object, ConnectionWatchdog>();

/** The watchdog of `client` (created on first use; the first `deadAfter` sticks). */
export function watchdogFor(client: object, kind: 'ioredis' | 'node-redis', deadAfter: number): ConnectionWatchdog {
  let watchdog = watchdogs.get(client);
  if (!watchdog) watchdogs.set(client, (watchdog = new ConnectionWatchdog(client, kind, deadAfter)));
  return watchdog;
}

export class ConnectionWatchdog {
  /** performance.now() of the last reply the client gave a call of this package. */
  private answeredAt = -Infinity;
  /** Sending time of the oldest timed-out call with no reply since; undefined once one came. */
  private silentSince: number | undefined;
  private notReadySince: number | undefined;
  private dropping: NodeJS.Timeout | undefined;
  private droppedAt = -Infinity;
  /** node-redis: the `connect()` this watchdog started, until it settles. */
  private reopening: Promise<unknown> | undefined;
  private stopped = false;
  private readonly listeners = new Set<ConnectionDropListener>();
  /** Connections dropped so far. */
  drops = 0;

  constructor(
    private readonly client: object,
    private readonly kind: 'ioredis' | 'node-redis',
    readonly deadAfter: number,
  ) {}

  /** Called with every reply (a call's value). */
  answered(): void {
    this.answeredAt = performance.now();
    this.silentSince = undefined;
  }

  /** A call sent at `sentAt` (performance.now()) got no reply in time. */
  timedOut(sentAt: number): void {
    if (this.answeredAt >= sentAt) return;
    if (this.silentSince === undefined || sentAt < this.silentSince) this.silentSince = sentAt;
    this.check();
  }

  /**
   * At each call and timeout: a connection silent for `deadAfter` while calls waited, or
   * whose handshake has gone unanswered for `deadAfter`, is dropped.
   */
  check(): void {
    const now = performance.now();
    if (this.silentSince !== undefined && now - this.silentSince >= this.deadAfter) {
      this.drop(`no reply on its connection for ${Math.round(now - this.silentSince)} ms while calls waited`);
      return;
    }
    const ready = this.readiness();
    if (ready !== false) {
      this.notReadySince = undefined;
      return;
    }
    this.notReadySince ??= now;
    const waited = Math.round(now - this.notReadySince);
    if (waited >= this.deadAfter) this.drop(`connected but not ready for ${waited} ms (its handshake got no answer)`);
  }

  /** Listeners of the drops (each store on the client adds its own). */
  onDrop(listener: ConnectionDropListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** No reopening from now on (the store was closed: the client's owner closes it next). */
  stop(): void {
    this.stopped = true;
  }

  /** true: ready; false: connected (or connecting) but not ready; undefined: nothing to judge. */
  private readiness(): boolean | undefined {
    if (this.kind === 'node-redis') {
      const client = this.client as NodeRedisConnection;
      if (!client.isOpen || typeof client.isReady !== 'boolean') return undefined;
      return client.isReady;
    }
    const client = this.client as IoredisConnection;
    // ioredis's 'connect': the socket is open, the handshake (HELLO, the ready check) not answered yet.
    // A Cluster's states are its own (slot discovery has its own timeout).
    if (client.nodes !== undefined || client.status === undefined) return undefined;
    if (client.status === 'ready') return true;
    return client.status === 'connect' ? false : undefined;
  }

  private drop(why: string): void {
    const now = performance.now();
    if (this.stopped || this.dropping || now - this.droppedAt < this.deadAfter) return;
    this.droppedAt = now;
    this.silentSince = undefined;
    this.notReadySince = undefined;
    // After the callers' reactions to the timeouts were written (see above).
    this.dropping = setTimeout(() => {
      this.dropping = undefined;
      if (!this.stopped) this.dropNow(why);
    }, WRITE_BEHIND_MS);
    this.dropping.unref();
  }

  private dropNow(why: string): void {
    const action = this.kind === 'ioredis' ? this.dropIoredis() : this.reopenNodeRedis();
    if (action === undefined) return;
    this.drops++;
    const reason = `Redis connection dropped: ${why}; ${action}`;
    for (const listener of this.listeners) listener(reason);
  }

  private dropIoredis(): string | undefined {
    const client = this.client as IoredisConnection;
    if (typeof client.disconnect !== 'function' || client.status === 'end' || client.status === 'wait') return undefined;
    client.disconnect(true);
    return 'the client reconnects (ioredis disconnect(true))';
  }

  private reopenNodeRedis(): string | undefined {
    const client = this.client as NodeRedisConnection;
    if (!client.isOpen || typeof client.destroy !== 'function') return undefined;
    const wasReady = client.isReady === true;
    const previous = this.reopening;
    client.destroy();
    if (wasReady && previous === undefined) {
      // No connection loop is running: open it again at once.
      this.track(client.connect());
    } else {
      // A connection loop (its own, or ours) is stuck in a handshake: it ends once it sees
      // its socket closed; open the client again after that, unless its owner closed it. A
      // Cluster's slot discovery stuck on a root node is not ended by destroy(): no wait on it.
      const pause = new Promise<void>((resolve) => setTimeout(resolve, LOOP_EXIT_MS).unref());
      const loopEnded = previous ? Promise.race([previous, pause]) : pause;
      this.track(loopEnded.then(() => (this.stopped || client.isOpen ? undefined : client.connect())));
    }
    return 'the client was destroyed and connected again (node-redis destroy() then connect())';
  }

  private track(work: Promise<unknown>): void {
    const reopening = work.then(
      () => undefined,
      () => undefined,
    );
    this.reopening = reopening;
    void reopening.then(() => {
      if (this.reopening === reopening) this.reopening = undefined;
    });
  }
}
