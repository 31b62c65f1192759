import type { NearCacheClient, TrackingConnection } from './near-cache-connection.js';
import { NodeRedisTrackingConnection, type NodeRedisConnection } from './node-redis-tracking.js';

/** The keys and arguments of a node-redis `EVAL` / `EVALSHA` call. */
interface NodeRedisEvalOptions {
  keys?: string[];
  arguments?: string[];
}

/**
 * The part of a node-redis client (`redis` 5 or 6, from `createClient()` or `createCluster()`)
 * the Redis classes of this package use. Both majors match it structurally, so `redis`
 * stays an optional peer dependency that this package never imports at runtime.
 */
export interface NodeRedisClientLike {
  /** True once `connect()` was called (until closed, or its `reconnectStrategy` gave up). */
  readonly isOpen: boolean;
  /** True while connected: with `disableOfflineQueue`, commands are refused otherwise. (node-redis 5's Cluster has none.) */
  readonly isReady?: boolean;
  connect(): Promise<unknown>;
  eval(script: string, options?: NodeRedisEvalOptions): Promise<unknown>;
  evalSha(sha1: string, options?: NodeRedisEvalOptions): Promise<unknown>;
  ping(): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  removeListener(event: string, listener: (...args: unknown[]) => void): unknown;
  /** node-redis's client options; `keyPrefix` (node-redis 6) is read for the near cache. */
  readonly options?: unknown;
  /** A standalone client's new connection with the same settings (for the near cache). */
  duplicate?(overrides?: never): unknown;
}

/**
 * True for a node-redis client or cluster. Told apart from ioredis by node-redis's
 * camelCase `evalSha` and boolean `isOpen` (ioredis has `evalsha` and a string `status`).
 */
export function isNodeRedisClient(client: unknown): client is NodeRedisClientLike {
  const candidate = client as Partial<NodeRedisClientLike> | null | undefined;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.evalSha === 'function' &&
    typeof candidate.eval === 'function' &&
    typeof candidate.isOpen === 'boolean'
  );
}

/**
 * A node-redis client seen through the ioredis-shaped calls the package's classes make
 * (`eval` / `evalsha` with `numkeys`, `ping`), and through `NearCacheClient` for the near
 * cache: the logic stays once in the store, the runner and the tracking.
 *
 * Commands go through node-redis's own `eval` / `evalSha`, so its `keyPrefix` applies to
 * script keys as ioredis's does, and a Cluster routes each script by its one key.
 */
export class NodeRedisAdapter implements NearCacheClient {
  /** Set on a `createCluster()` client (it has `masters`): the near cache refuses it. */
  readonly isCluster: boolean;
  readonly options: { readonly keyPrefix?: string };

  constructor(readonly client: NodeRedisClientLike) {
    this.isCluster = Array.isArray((client as { masters?: unknown }).masters);
    const keyPrefix = (client.options as { keyPrefix?: unknown } | undefined)?.keyPrefix;
    this.options = { keyPrefix: keyPrefix === undefined || keyPrefix === null ? undefined : String(keyPrefix) };
  }

  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    return this.client.eval(script, evalOptions(numkeys, args)).catch(explainTimeout);
  }

  evalsha(sha1: string, numkeys: number, ...args: (string | number)[]): Promise<unknown> {
    return this.client.evalSha(sha1, evalOptions(numkeys, args)).catch(explainTimeout);
  }

  ping(): Promise<unknown> {
    return this.client.ping().catch(explainTimeout);
  }

  /**
   * The near cache's connection: a `duplicate()` speaking RESP2 (invalidations arrive as
   * messages of `__redis__:invalidate`), without reconnection of its own (the tracking
   * opens a new one after a loss, and sets tracking up again on it).
   */
  openTrackingConnection(): TrackingConnection {
    const client = this.client;
    if (this.isCluster || typeof client.duplicate !== 'function') {
      throw new Error('openTrackingConnection: needs a standalone node-redis client');
    }
    const options = (client.options ?? {}) as { socket?: Record<string, unknown> };
    const overrides = {
      RESP: 2,
      socket: { ...options.socket, reconnectStrategy: false },
      // Key names in invalidation messages are full Redis keys; this connection sends none.
      keyPrefix: undefined,
      // Replies as node-redis decodes them by default (a typeMapping to Buffers would hide CLIENT ID's number).
      commandOptions: undefined,
      // RESP3-only features, refused by node-redis on a RESP2 connection.
      clientSideCache: undefined,
      emitInvalidate: undefined,
      maintNotifications: 'disabled',
      disableOfflineQueue: false,
    };
    return new NodeRedisTrackingConnection(client.duplicate(overrides as never) as NodeRedisConnection);
  }
}

/** The client as the package's classes call it: node-redis adapted, ioredis as it is. */
export function adaptNodeRedis<T>(client: T): Exclude<T, NodeRedisClientLike> | NodeRedisAdapter {
  return isNodeRedisClient(client) ? new NodeRedisAdapter(client) : (client as Exclude<T, NodeRedisClientLike>);
}

/** `numkeys, ...keysThenArguments` (ioredis's order) as node-redis's options; strings only. */
function evalOptions(numkeys: number, args: (string | number)[]): NodeRedisEvalOptions {
  // Every script of this package touches one key.
  if (numkeys === 1) {
    const rest: string[] = new Array<string>(args.length - 1);
    for (let i = 1; i < args.length; i++) rest[i - 1] = String(args[i]);
    return { keys: [String(args[0])], arguments: rest };
  }
  const strings = args.map(String);
  return { keys: strings.slice(0, numkeys), arguments: strings.slice(numkeys) };
}

/**
 * node-redis rejects a command not yet written within its `commandOptions.timeout` with
 * a `TimeoutError` whose message is empty: give it one, so that logs say what happened.
 */
function explainTimeout(error: unknown): never {
  if (error instanceof Error && error.constructor.name === 'TimeoutError' && error.message === '') {
    error.message = 'node-redis: the command was not sent within its commandOptions.timeout';
  }
  throw error;
}
