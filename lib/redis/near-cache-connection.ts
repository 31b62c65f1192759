/**
 * The near cache's dedicated connection, as `NearCacheTracking` drives it: ioredis's own
 * shape (ioredis 5 and 6 both match it), which the node-redis adapter
 * (`node-redis-tracking.ts`) reproduces, so the tracking logic is written once.
 *
 * Events: `ready` (connected, commands may be sent), `error`, `close` and `reconnecting`
 * (the connection was lost), `end` (it will not come back by itself), `messageBuffer`
 * (`(channel, message)`: a message of a subscribed channel, as Buffers).
 */
export interface TrackingConnection {
  /** `'ready'` while commands may be sent; anything else otherwise. */
  readonly status: string;
  connect(): Promise<void>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  subscribe(channel: string): Promise<unknown>;
  quit(): Promise<unknown>;
  /** Drops the connection; `reconnect: true` asks for a new one (ioredis reconnects, node-redis ends it and the tracking opens another). */
  disconnect(reconnect?: boolean): void;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  removeAllListeners(event?: string): unknown;
}

/** The user's client as the near cache needs it (ioredis, or the node-redis adapter). */
export interface NearCacheClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  /** ioredis: a new connection with the same settings. */
  duplicate?(override?: Record<string, unknown>): unknown;
  /** A client that opens the tracking connection itself (the node-redis adapter). */
  openTrackingConnection?(): TrackingConnection;
  readonly isCluster?: boolean;
  /** The prefix the client puts before every key it sends (ioredis and node-redis 6 `keyPrefix`). */
  readonly options?: { readonly keyPrefix?: string };
}

/** Opens (lazily: `connect()` does) the near cache's dedicated connection on `client`. */
export function openTrackingConnection(client: NearCacheClient): TrackingConnection {
  if (client.openTrackingConnection) return client.openTrackingConnection();
  return client.duplicate!({
    // RESP2: over RESP3, invalidations come as push frames, which ioredis 6 drops.
    protocol: 2,
    autoResubscribe: false,
    lazyConnect: true,
    // Key names in invalidation messages are full Redis keys; this connection sends none.
    keyPrefix: undefined,
    enableOfflineQueue: true,
  }) as TrackingConnection;
}

/** Waits for `work` to settle, at most `timeout` ms; never rejects (the near cache's best-effort goodbyes). */
export async function settleWithin(work: Promise<unknown>, timeout: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeout);
    timer.unref();
  });
  try {
    await Promise.race([work.catch(() => undefined), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Quits `connection` (waiting at most `timeout` ms for Redis's answer), then drops it. */
export async function quitConnection(connection: TrackingConnection, timeout: number): Promise<void> {
  if (connection.status !== 'ready') {
    connection.disconnect();
    return;
  }
  try {
    await settleWithin(
      Promise.resolve().then(() => connection.quit()),
      timeout,
    );
  } finally {
    connection.disconnect();
  }
}
