import { IdempotencyConfigurationError } from '../core/errors.js';
import { recommendedRedisOptions, type RecommendedRedisOptionsInput } from './recommended-options.js';
import type { RedisClientLike } from './redis-client.js';
import { RedisIdempotencyStore, type RedisIdempotencyStoreOptions } from './redis.store.js';

/** Options of `createRedisIdempotencyStore`: where Redis is, and the store's own options. */
export interface OwnedRedisIdempotencyStoreOptions extends RedisIdempotencyStoreOptions, RecommendedRedisOptionsInput {
  /**
   * Where Redis is: `redis://[[user]:password@]host[:port][/db]`, or `rediss://` for TLS.
   * @default 'redis://127.0.0.1:6379'
   */
  url?: string;
  /**
   * More ioredis options (`tls`, `username`, `name`, ...), applied over
   * `recommendedRedisOptions()` made with this object's timeouts (`commandTimeout`,
   * `connectTimeout`, `socketTimeout`, `maxReconnectDelay`).
   * @default none
   */
  redisOptions?: Readonly<Record<string, unknown>>;
}

/** The ioredis client the store made, and how to end it. */
interface OwnedClient extends RedisClientLike {
  on(event: 'error', listener: (error: unknown) => void): unknown;
  quit(): Promise<unknown>;
  disconnect(): void;
}

/** A store that made its client: closing the store ends it. */
class OwnedRedisIdempotencyStore extends RedisIdempotencyStore {
  constructor(
    private readonly owned: OwnedClient,
    options: RedisIdempotencyStoreOptions,
  ) {
    super(owned, options);
  }

  /** The boot check; a client that is not ready in time is ended, so it does not keep the process alive reconnecting. */
  override async verify(): Promise<void> {
    try {
      await super.verify();
    } catch (error) {
      this.owned.disconnect();
      throw error;
    }
  }

  override async close(): Promise<void> {
    await super.close();
    // quit() lets pending replies arrive; a client that is not connected (Redis down, or never up) has none: drop it.
    if (this.owned.status !== 'ready') this.owned.disconnect();
    else await this.owned.quit().catch(() => this.owned.disconnect());
  }
}

/**
 * A Redis store that owns its ioredis client: made here from `url` with
 * `recommendedRedisOptions()` (fail fast while Redis is down, reconnect by itself), waited
 * for at boot by `IdempotencyModule` (up to `readyTimeout`, as any client; one that is not
 * ready by then stops `app.init()` and is ended), and ended when the module closes
 * (`app.close()`, SIGTERM with `enableShutdownHooks()`). The client's
 * `'error'` events are taken (the store reports what it refuses), so an outage prints no
 * "Unhandled error event". ioredis is loaded here, when called: install it
 * (`npm install ioredis`). To share one client with other code, or to use node-redis or a
 * Cluster, pass a client to `new RedisIdempotencyStore(client)` instead.
 *
 * @example
 * IdempotencyModule.forRootAsync({
 *   isGlobal: true,
 *   useFactory: async () => ({ store: await createRedisIdempotencyStore({ url: process.env.REDIS_URL, prefix: 'payments:' }) }),
 * })
 */
export async function createRedisIdempotencyStore(options: OwnedRedisIdempotencyStoreOptions = {}): Promise<RedisIdempotencyStore> {
  const {
    url = 'redis://127.0.0.1:6379',
    redisOptions,
    commandTimeout,
    connectTimeout,
    socketTimeout,
    maxReconnectDelay,
    ...storeOptions
  } = options;
  if (typeof url !== 'string' || !/^rediss?:\/\//.test(url)) {
    throw new IdempotencyConfigurationError(
      `createRedisIdempotencyStore: url must be a redis:// or rediss:// URL, got ${typeof url === 'string' ? `'${url}'` : typeof url}.`,
      "Write url: 'redis://host:6379' (or process.env.REDIS_URL), or leave it out for redis://127.0.0.1:6379.",
    );
  }
  const recommended = recommendedRedisOptions({ commandTimeout, connectTimeout, socketTimeout, maxReconnectDelay });
  const Redis = await loadIoredis();
  const client = new Redis(url, { ...recommended, ...redisOptions });
  client.on('error', () => {});
  return new OwnedRedisIdempotencyStore(client, storeOptions);
}

type RedisConstructor = new (url: string, options: Record<string, unknown>) => OwnedClient;

async function loadIoredis(): Promise<RedisConstructor> {
  let loaded: { Redis?: RedisConstructor; default?: RedisConstructor | { Redis?: RedisConstructor } };
  try {
    loaded = (await import('ioredis')) as unknown as typeof loaded;
  } catch (error) {
    throw new IdempotencyConfigurationError(
      'createRedisIdempotencyStore makes an ioredis client, and ioredis is not installed.',
      'Run npm install ioredis (5 or 6), or pass a client of your own to new RedisIdempotencyStore(client).',
      { cause: error },
    );
  }
  const fromDefault = loaded.default;
  const Redis = loaded.Redis ?? (typeof fromDefault === 'function' ? fromDefault : fromDefault?.Redis);
  if (typeof Redis !== 'function') {
    throw new IdempotencyConfigurationError(
      'createRedisIdempotencyStore: the installed ioredis exports no Redis class.',
      'Install ioredis 5 or 6 (npm install ioredis).',
    );
  }
  return Redis;
}
