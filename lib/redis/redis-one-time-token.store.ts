import type { OneTimeTokenConsumeResult, OneTimeTokenStore } from '../tokens/one-time-token.store.js';
import { LuaScript, RedisScriptRunner, wholeMs, type RedisCallOptions, type RedisClientLike } from './redis-client.js';
import type { NodeRedisClientLike } from './node-redis-client.js';

/** Options of `RedisOneTimeTokenStore`. */
export interface RedisOneTimeTokenStoreOptions extends RedisCallOptions {
  /** Prepended to every key. @default 'one-time-token:' */
  prefix?: string;
}

// One string per token: 'i' (issued) then 'u' (used) until the token's own expiry.
const SAVE = new LuaScript(
  'save',
  `if redis.call('SET', KEYS[1], 'i', 'PX', ARGV[1], 'NX') then return 1 end
return 0
`,
);

// GET then SET in one script: exactly one concurrent caller sees 'i'.
const CONSUME = new LuaScript(
  'consume',
  `local state = redis.call('GET', KEYS[1])
if state == 'i' then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('SET', KEYS[1], 'u', 'PX', ttl) else redis.call('DEL', KEYS[1]) end
  return 1
end
if state == 'u' then return 2 end
return 0
`,
);

const REVOKE = new LuaScript('revoke', `return redis.call('DEL', KEYS[1])`);

/**
 * One-time tokens in Redis (ioredis 5 or 6, standalone or Cluster), shared by every
 * instance: `consume` is one atomic script, so of any number of concurrent
 * submissions of one token, on any number of processes, exactly one is accepted.
 *
 * @example
 * OneTimeTokenModule.forRoot({ isGlobal: true, store: new RedisOneTimeTokenStore(redis) })
 */
export class RedisOneTimeTokenStore implements OneTimeTokenStore {
  readonly prefix: string;
  private readonly scripts: RedisScriptRunner;

  constructor(client: RedisClientLike | NodeRedisClientLike, options: RedisOneTimeTokenStoreOptions = {}) {
    this.scripts = new RedisScriptRunner(client, options, 'RedisOneTimeTokenStore');
    this.prefix = options.prefix ?? 'one-time-token:';
  }

  async save(key: string, ttl: number): Promise<boolean> {
    const px = wholeMs(ttl, 'ttl', 'RedisOneTimeTokenStore.save');
    return Number(await this.scripts.run(SAVE, this.prefix + key, [px])) === 1;
  }

  async consume(key: string): Promise<OneTimeTokenConsumeResult> {
    const reply = Number(await this.scripts.run(CONSUME, this.prefix + key, []));
    return reply === 1 ? 'consumed' : reply === 2 ? 'already_used' : 'unknown';
  }

  async revoke(key: string): Promise<boolean> {
    return Number(await this.scripts.run(REVOKE, this.prefix + key, [])) > 0;
  }

  ping(): Promise<void> {
    return this.scripts.ping();
  }
}
