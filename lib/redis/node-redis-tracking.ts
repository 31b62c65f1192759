import { EventEmitter } from 'node:events';
import type { TrackingConnection } from './near-cache-connection.js';

/** The part of a node-redis (5 or 6) standalone client the near cache's connection uses. */
export interface NodeRedisConnection {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  connect(): Promise<unknown>;
  sendCommand(args: string[]): Promise<unknown>;
  subscribe(channel: string, listener: (message: unknown, channel: unknown) => void, bufferMode: true): Promise<unknown>;
  close?(): Promise<unknown>;
  quit?(): Promise<unknown>;
  destroy(): void;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
}

/**
 * A node-redis connection in the shape `NearCacheTracking` drives (ioredis's, see
 * `TrackingConnection`). It never reconnects by itself (created with
 * `reconnectStrategy: false`): a lost connection ends (`end`), and the tracking opens a
 * new one, on which it sets tracking up and proves delivery again. node-redis would
 * resubscribe a reconnected RESP2 connection before it is ready, and a subscribed RESP2
 * connection cannot send `CLIENT ID` or `CLIENT TRACKING`.
 */
export class NodeRedisTrackingConnection extends EventEmitter implements TrackingConnection {
  private ended = false;

  constructor(private readonly client: NodeRedisConnection) {
    super();
    client.on('ready', () => this.emit('ready'));
    client.on('error', (error: unknown) => {
      this.emit('error', error);
      // Not open after an error: its reconnectStrategy (false) gave up on it.
      if (!client.isOpen) this.end();
    });
    client.on('end', () => this.end());
  }

  get status(): string {
    return this.client.isReady ? 'ready' : this.ended ? 'end' : 'connecting';
  }

  async connect(): Promise<void> {
    await this.client.connect();
  }

  call(command: string, ...args: (string | number)[]): Promise<unknown> {
    return this.client.sendCommand([command, ...args.map(String)]);
  }

  subscribe(channel: string): Promise<unknown> {
    // Buffers mode: node-redis hands the invalidation's array of keys (or null) as it came.
    return this.client.subscribe(channel, (message, from) => this.emit('messageBuffer', from, message), true);
  }

  quit(): Promise<unknown> {
    return this.client.close ? this.client.close() : this.client.quit!();
  }

  disconnect(reconnect?: boolean): void {
    try {
      this.client.destroy();
    } catch {
      // Already closed.
    }
    // A new connection is what the tracking asks for: it opens one on `end`.
    if (reconnect) this.end();
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.emit('end');
  }
}
