/**
 * A TCP proxy with network faults on demand, between an application and a store
 * (PostgreSQL, MariaDB, Redis, a Redis Cluster node): the faults that real outages look
 * like and that killing a process cannot cause.
 *
 * - `freeze()`: nothing moves in either direction, every socket stays open (a failover,
 *   a full conntrack table, a dropped route). What either side sends meanwhile is held,
 *   and delivered in order on `heal()`, as TCP would once the path returns; so is a side's
 *   close (its FIN): a client that gives up on a frozen connection still has its last
 *   statement reach the store after the heal.
 * - `latency({ ms, jitterMs })`: every chunk waits `ms ± jitterMs` (order kept).
 * - `resetMidReply({ afterBytes })`: the next reply is cut after `afterBytes` bytes and
 *   both sockets are reset (RST), so the client holds a partial answer.
 * - `refuse()`: new connections are refused (the listener closes: ECONNREFUSED).
 * - `blackhole()`: every byte of the connections open now, and of those accepted while it
 *   is on, is dropped in both directions, for good (a NAT or firewall that lost its state,
 *   a failover behind a virtual IP that sends no RST): the sockets stay open, neither side
 *   hears of the other again, not even a close. Only connections accepted after `heal()`
 *   carry bytes. (A SYN cannot be dropped from user space: a connection made during the
 *   fault is accepted, then blackholed, as a path that loses its state right after the
 *   handshake would.)
 * - `heal()`: all of the above off (blackholed connections stay dead).
 *
 * Tests synchronise on its events (`held`, `dropped`, `reset`, `connection`) or on `stats`, never on
 * sleeps. Started on an OS-chosen free port by `startFaultProxy`, stopped by `stop()`.
 */
import { EventEmitter } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export type Direction = 'request' | 'reply';

export interface LatencyFault {
  /** Added to every chunk, ms. */
  readonly ms: number;
  /** Each chunk waits `ms` plus a uniform random amount in [-jitterMs, +jitterMs]. @default 0 */
  readonly jitterMs?: number;
  /** Which direction is slowed. @default 'both' */
  readonly direction?: Direction | 'both';
}

export interface ResetFault {
  /** Bytes of the reply forwarded before the reset (0: none of it). */
  readonly afterBytes: number;
  /** How many replies are cut; `Infinity`: every one until `heal()`. @default 1 */
  readonly count?: number;
  /** Chance that a given reply is cut (seeded by `random`), so only some of them are. @default 1 */
  readonly probability?: number;
}

export interface FaultProxyStats {
  /** Connections accepted since the start. */
  accepted: number;
  /** Connections open now. */
  open: number;
  /** Connections reset by `resetMidReply` or `dropConnections`. */
  reset: number;
  /** Bytes delivered per direction. */
  bytes: Record<Direction, number>;
  /** Bytes held by a freeze, not delivered yet. */
  heldBytes: number;
  /** Connections blackholed so far (their bytes dropped for good). */
  blackholed: number;
  /** Bytes dropped by blackholed connections, per direction. */
  droppedBytes: Record<Direction, number>;
}

export interface FaultProxyOptions {
  readonly target: { host: string; port: number };
  /** Listen port. @default 0 (OS-chosen) */
  readonly port?: number;
  /** Random source for jitter and the reset probability. @default Math.random */
  readonly random?: () => number;
}

interface Queued {
  /** null: the sending side closed; the pair closes once what it sent before is delivered. */
  chunk: Buffer | null;
  at: number;
}

/** One proxied connection: the client side, the store side, a queue per direction. */
class Pair {
  readonly queues: Record<Direction, Queued[]> = { request: [], reply: [] };
  readonly lastAt: Record<Direction, number> = { request: 0, reply: 0 };
  readonly timers: Record<Direction, NodeJS.Timeout | undefined> = { request: undefined, reply: undefined };
  closed = false;
  /** Blackholed: every byte from either side is dropped, for good (no close goes through either). */
  dead = false;
  /** A cut reply's last part is being written: nothing more is forwarded, the reset follows. */
  cutting = false;
  /** A request went out since the last reply started: the next reply chunk starts a new reply. */
  awaitingReply = true;
  /** Bytes of the current reply left before its reset, or undefined when it is not cut. */
  cutIn: number | undefined;

  constructor(
    readonly client: Socket,
    readonly server: Socket,
  ) {}

  socketFor(direction: Direction): Socket {
    return direction === 'request' ? this.server : this.client;
  }
}

export class FaultProxy extends EventEmitter {
  readonly stats: FaultProxyStats = {
    accepted: 0,
    open: 0,
    reset: 0,
    bytes: { request: 0, reply: 0 },
    heldBytes: 0,
    blackholed: 0,
    droppedBytes: { request: 0, reply: 0 },
  };
  private readonly pairs = new Set<Pair>();
  private frozen = false;
  private delay: LatencyFault | undefined;
  private cut: (ResetFault & { left: number }) | undefined;
  private refusing = false;
  private blackholing = false;
  private server: Server;
  private stopped = false;
  private readonly random: () => number;
  port = 0;

  constructor(private readonly options: FaultProxyOptions) {
    super();
    this.random = options.random ?? Math.random;
    this.server = this.createListener();
  }

  /** `host:port` of the proxy, for the client's connection settings. */
  get address(): { host: string; port: number } {
    return { host: '127.0.0.1', port: this.port };
  }

  /** Whether a freeze is on. */
  get isFrozen(): boolean {
    return this.frozen;
  }

  async listen(port = this.options.port ?? 0): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.port = (this.server.address() as { port: number }).port;
  }

  /** Pauses both directions of every connection, open and new; sockets stay open. */
  freeze(): void {
    this.frozen = true;
  }

  /** Adds latency to every chunk from now on (chunks already queued keep theirs). */
  latency(fault: LatencyFault): void {
    if (fault.ms < 0 || (fault.jitterMs ?? 0) < 0 || (fault.jitterMs ?? 0) > fault.ms) {
      throw new Error(`latency: ms (${fault.ms}) and jitterMs (${fault.jitterMs}) must be >= 0, jitterMs <= ms`);
    }
    this.delay = fault;
  }

  /** Cuts the next reply(ies) after `afterBytes` bytes and resets both sockets. */
  resetMidReply(fault: ResetFault): void {
    this.cut = { ...fault, left: fault.count ?? 1 };
  }

  /** Refuses new connections (the listener closes); open ones are left alone. */
  async refuse(): Promise<void> {
    if (this.refusing) return;
    this.refusing = true;
    // close() calls back only once every accepted connection ended; the listening socket closes at once.
    this.server.close();
    await Promise.resolve();
  }

  /**
   * Drops every byte of the open connections, and of those accepted until `heal()`, for
   * good, in both directions; a close from either side is dropped too (the other side
   * never hears of it). The connections stay dead after the heal.
   */
  blackhole(): void {
    this.blackholing = true;
    for (const pair of this.pairs) this.kill(pair);
  }

  /** Resets every open connection (RST both sides). */
  dropConnections(): void {
    for (const pair of this.pairs) this.reset(pair);
  }

  /** Every fault off: held chunks are delivered in order, new connections accepted again. */
  async heal(): Promise<void> {
    this.frozen = false;
    this.delay = undefined;
    this.cut = undefined;
    this.blackholing = false;
    if (this.refusing) {
      this.refusing = false;
      this.server = this.createListener();
      await this.listen(this.port);
    }
    for (const pair of this.pairs) {
      for (const direction of ['request', 'reply'] as const) this.pump(pair, direction);
    }
    this.stats.heldBytes = 0;
    this.emit('healed');
  }

  /** Closes the listener and destroys every connection. Safe to call twice. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const pair of this.pairs) this.close(pair);
    if (this.server.listening) await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Resolves on the first `event` whose payload passes `test`, or rejects after `timeoutMs`. */
  waitFor<T>(event: string, test: (value: T) => boolean = () => true, timeoutMs = 10_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off(event, listener);
        reject(new Error(`fault proxy: no '${event}' within ${timeoutMs} ms`));
      }, timeoutMs);
      const listener = (value: T) => {
        if (!test(value)) return;
        clearTimeout(timer);
        this.off(event, listener);
        resolve(value);
      };
      this.on(event, listener);
    });
  }

  private createListener(): Server {
    return createServer({ noDelay: true }, (client) => this.accept(client));
  }

  private accept(client: Socket): void {
    if (this.stopped || this.refusing) {
      client.destroy();
      return;
    }
    const server = createConnection({ ...this.options.target, noDelay: true });
    const pair = new Pair(client, server);
    this.pairs.add(pair);
    this.stats.accepted++;
    this.stats.open++;
    client.on('data', (chunk: Buffer) => this.receive(pair, 'request', chunk));
    server.on('data', (chunk: Buffer) => this.receive(pair, 'reply', chunk));
    // Either side closing or failing ends the pair after what it sent before (a FIN travels
    // behind the data, and a frozen path holds it like the data until the heal).
    client.on('error', () => undefined).on('close', () => this.receive(pair, 'request', null));
    server.on('error', () => undefined).on('close', () => this.receive(pair, 'reply', null));
    if (this.blackholing) this.kill(pair);
    this.emit('connection', this.stats.accepted);
  }

  /** Blackholes one connection: what it held is dropped, and all it will ever carry. */
  private kill(pair: Pair): void {
    if (pair.dead || pair.closed) return;
    pair.dead = true;
    this.stats.blackholed++;
    for (const direction of ['request', 'reply'] as const) {
      if (pair.timers[direction]) clearTimeout(pair.timers[direction]);
      pair.timers[direction] = undefined;
      const dropped = pair.queues[direction].splice(0).reduce((n, q) => n + (q.chunk?.length ?? 0), 0);
      if (this.frozen) this.stats.heldBytes = Math.max(0, this.stats.heldBytes - dropped);
      this.stats.droppedBytes[direction] += dropped;
    }
  }

  private receive(pair: Pair, direction: Direction, chunk: Buffer | null): void {
    if (pair.closed || pair.cutting) return;
    if (pair.dead) {
      // Dropped, data and close alike; the pair is cleaned up by stop().
      this.stats.droppedBytes[direction] += chunk?.length ?? 0;
      this.emit('dropped', { direction, bytes: chunk?.length ?? 0, droppedBytes: this.stats.droppedBytes[direction] });
      return;
    }
    const now = Date.now();
    let at = now;
    if (this.delay && (this.delay.direction ?? 'both') !== (direction === 'request' ? 'reply' : 'request')) {
      const jitter = this.delay.jitterMs ?? 0;
      at = now + this.delay.ms + (jitter > 0 ? (this.random() * 2 - 1) * jitter : 0);
    }
    // Order is kept: a chunk never overtakes the one before it.
    at = Math.max(at, pair.lastAt[direction]);
    pair.lastAt[direction] = at;
    pair.queues[direction].push({ chunk, at });
    if (this.frozen) {
      this.stats.heldBytes += chunk?.length ?? 0;
      this.emit('held', { direction, bytes: chunk?.length ?? 0, heldBytes: this.stats.heldBytes });
      return;
    }
    this.pump(pair, direction);
  }

  /** Delivers the chunks of one direction that are due; schedules the next one. */
  private pump(pair: Pair, direction: Direction): void {
    if (pair.closed || pair.cutting || pair.dead || this.frozen) return;
    const queue = pair.queues[direction];
    const now = Date.now();
    while (queue.length > 0 && queue[0].at <= now) {
      const { chunk } = queue.shift()!;
      if (chunk === null) {
        this.close(pair);
        return;
      }
      if (!this.forward(pair, direction, chunk)) return;
    }
    if (queue.length > 0 && pair.timers[direction] === undefined) {
      pair.timers[direction] = setTimeout(
        () => {
          pair.timers[direction] = undefined;
          this.pump(pair, direction);
        },
        Math.max(0, queue[0].at - now),
      );
    }
  }

  /** Writes one chunk on; false when the pair was reset on the way (a cut reply). */
  private forward(pair: Pair, direction: Direction, chunk: Buffer): boolean {
    if (direction === 'request') {
      pair.awaitingReply = true;
    } else if (pair.awaitingReply) {
      pair.awaitingReply = false;
      pair.cutIn = this.selectCut();
    }
    if (direction === 'reply' && pair.cutIn !== undefined) {
      const part = chunk.subarray(0, pair.cutIn);
      pair.cutIn -= part.length;
      if (part.length < chunk.length || pair.cutIn === 0) {
        this.stats.bytes.reply += part.length;
        if (part.length === 0) {
          this.reset(pair);
          return false;
        }
        // Nothing else goes through; the partial reply reaches the client before the reset.
        pair.cutting = true;
        pair.client.write(part, () => this.reset(pair));
        return false;
      }
    }
    this.stats.bytes[direction] += chunk.length;
    pair.socketFor(direction).write(chunk);
    return true;
  }

  private selectCut(): number | undefined {
    const cut = this.cut;
    if (!cut || cut.left <= 0) return undefined;
    if ((cut.probability ?? 1) < 1 && this.random() >= (cut.probability ?? 1)) return undefined;
    cut.left--;
    return cut.afterBytes;
  }

  private reset(pair: Pair): void {
    if (pair.closed) return;
    this.stats.reset++;
    this.emit('reset', this.stats.reset);
    pair.client.resetAndDestroy();
    pair.server.resetAndDestroy();
    this.close(pair);
  }

  private close(pair: Pair): void {
    if (pair.closed) return;
    pair.closed = true;
    for (const timer of Object.values(pair.timers)) if (timer) clearTimeout(timer);
    this.pairs.delete(pair);
    this.stats.open--;
    if (this.frozen) {
      const held = pair.queues.request.concat(pair.queues.reply).reduce((n, q) => n + (q.chunk?.length ?? 0), 0);
      this.stats.heldBytes = Math.max(0, this.stats.heldBytes - held);
    }
    pair.client.destroy();
    pair.server.destroy();
  }
}

/** Starts a proxy to `target` on a free port (or `port`). */
export async function startFaultProxy(target: { host: string; port: number }, options: Omit<FaultProxyOptions, 'target'> = {}) {
  const proxy = new FaultProxy({ ...options, target });
  await proxy.listen();
  return proxy;
}
