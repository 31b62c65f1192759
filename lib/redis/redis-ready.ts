import { IdempotencyConfigurationError } from '../core/errors.js';
import { NodeRedisAdapter, type NodeRedisClientLike } from './node-redis-client.js';
import type { RedisClientLike, RedisScriptRunner } from './redis-client.js';

/** ioredis states from which a client becomes `ready` by itself (`close`: between a lost connection and the next attempt). */
const CONNECTING = new Set(['connecting', 'connect', 'reconnecting', 'close', 'disconnecting']);

/**
 * Resolves once an ioredis client (standalone or Cluster) is `ready`: a client created
 * without an offline queue (`recommendedRedisOptions()`) refuses every command until
 * then, so the first events, ticks and requests after boot would each fail as an
 * outage. Opens a `lazyConnect` client (`'wait'`). A client that is not ready within
 * `timeout` ms, or that has ended (closed, or its `retryStrategy` gave up), can serve
 * nothing: an `IdempotencyConfigurationError` naming what to check. A node-redis client
 * is awaited by `awaitNodeRedisReady`; another client without `status` is pinged instead,
 * bounded by the runner's own timeout.
 */
export async function awaitReady(runner: RedisScriptRunner, timeout: number, owner: string): Promise<void> {
  const adapted = runner.client;
  if (adapted instanceof NodeRedisAdapter) return awaitNodeRedisReady(adapted.client, timeout, owner);
  const client: RedisClientLike = adapted;
  const status = client.status;
  if (status === undefined) return runner.ping();
  if (status === 'ready') return;
  if (status === 'end') throw notReady(owner, 'has ended (closed with quit() or disconnect(), or its retryStrategy gave up)', undefined);
  // A state this code does not know (a later ioredis): its commands will tell.
  if (status !== 'wait' && !CONNECTING.has(status)) return;
  if (typeof client.on !== 'function' || typeof client.removeListener !== 'function') return runner.ping();
  let lastError: unknown;
  let onReady!: () => void;
  let onEnd!: () => void;
  const onError = (error: unknown) => (lastError = error);
  let timer: NodeJS.Timeout | undefined;
  const settled = new Promise<void>((resolve, reject) => {
    onReady = resolve;
    onEnd = () => reject(notReady(owner, 'ended before it was ready (its retryStrategy gave up)', lastError));
    timer = setTimeout(() => reject(notReady(owner, `was not ready within ${timeout} ms (status '${client.status}')`, lastError)), timeout);
  });
  client.on('ready', onReady);
  client.on('end', onEnd);
  client.on('error', onError);
  try {
    // A lazyConnect client connects on its first command, which it refuses without an
    // offline queue: open it now. A failed attempt is retried by its retryStrategy.
    if (status === 'wait') client.connect?.().catch(onError);
    await settled;
  } finally {
    clearTimeout(timer);
    client.removeListener('ready', onReady);
    client.removeListener('end', onEnd);
    client.removeListener('error', onError);
  }
}

function notReady(owner: string, what: string, cause: unknown): IdempotencyConfigurationError {
  // Not instanceof: a socket error may come from another realm (Node's own, under a test runner's VM).
  const message = (cause as Error | undefined)?.message;
  const reason = typeof message === 'string' && message !== '' ? ` Last error: ${message}.` : '';
  return new IdempotencyConfigurationError(
    `${owner}: the Redis client ${what}, so the application cannot start protected.${reason}`,
    'Check the Redis URL (host, port, password, TLS) and that Redis is up and reachable from this process. ' +
      'To wait longer, raise readyTimeout; to start without waiting (requests fail as an outage, 503 or onStoreError, until Redis answers), pass readyTimeout: 0.',
    { cause },
  );
}

/** How often the node-redis wait looks at `isReady`, ms (node-redis's Cluster has no `ready` event). */
const NODE_REDIS_POLL_MS = 20;

/**
 * `awaitReady` for node-redis (standalone or Cluster): resolves once `isReady`. A client
 * not connected yet (node-redis has no `lazyConnect`: `createClient()` alone opens
 * nothing) is connected now. Polls `isReady`, as node-redis's Cluster emits no `ready`;
 * a client that stops being open (closed, or its `reconnectStrategy` gave up) has ended.
 */
async function awaitNodeRedisReady(client: NodeRedisClientLike, timeout: number, owner: string): Promise<void> {
  if (isNodeRedisReady(client)) return;
  let lastError: unknown;
  let ended = false;
  // node-redis 5's Cluster has no isReady: its connect() resolving, or its 'connect' event, says it knows the slots.
  let connected = false;
  const onError = (error: unknown) => (lastError = error);
  const onConnect = () => (connected = typeof client.isReady !== 'boolean');
  client.on('error', onError);
  client.on('connect', onConnect);
  try {
    if (!client.isOpen) {
      // Rejects when its reconnectStrategy gives up (or it is closed meanwhile).
      client.connect().then(onConnect, (error: unknown) => {
        lastError ??= error;
        ended = true;
      });
    }
    const deadline = performance.now() + timeout;
    while (!(connected || isNodeRedisReady(client))) {
      if (ended || !client.isOpen) {
        throw notReady(owner, 'has ended (closed with close() or destroy(), or its reconnectStrategy gave up)', lastError);
      }
      const left = deadline - performance.now();
      if (left <= 0) throw notReady(owner, `was not ready within ${timeout} ms (isOpen ${client.isOpen}, isReady false)`, lastError);
      await new Promise((resolve) => setTimeout(resolve, Math.min(NODE_REDIS_POLL_MS, left)));
    }
  } finally {
    client.removeListener('error', onError);
    client.removeListener('connect', onConnect);
  }
}

/** `isReady`; for node-redis 5's Cluster, which has none: open and knowing its masters. */
function isNodeRedisReady(client: NodeRedisClientLike): boolean {
  if (typeof client.isReady === 'boolean') return client.isReady;
  const masters = (client as { masters?: unknown }).masters;
  return client.isOpen && Array.isArray(masters) && masters.length > 0;
}
