import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';

// The shared Redis on 6379, with a unique prefix per run so parallel runs never meet.
const prefix = () => `test:idem:${randomUUID()}:`;

describeStoreContract('RedisIdempotencyStore (ioredis 6, standalone)', async () => {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await client.connect();
  return { store: new RedisIdempotencyStore(client, { prefix: prefix() }), dispose: () => void client.disconnect() };
});

describeStoreContract('RedisIdempotencyStore (ioredis 5, standalone)', async () => {
  const client = new Redis5({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await client.connect();
  return { store: new RedisIdempotencyStore(client, { prefix: prefix() }), dispose: () => void client.disconnect() };
});

describe('RedisIdempotencyStore options and durations', () => {
  it('refuses a client that is not one, and a timeout that is not whole ms, as configuration errors', () => {
    expect(() => new RedisIdempotencyStore({} as never)).toThrow(IdempotencyConfigurationError);
    expect(() => new RedisIdempotencyStore({} as never)).toThrow(/RedisIdempotencyStore: the first argument must be an ioredis/);
    const client = new Redis({ lazyConnect: true });
    expect(() => new RedisIdempotencyStore(client, { timeout: 2.5 })).toThrow(
      /RedisIdempotencyStore: timeout must be a whole number of milliseconds 0 or more, got 2\.5/,
    );
    expect(() => new RedisIdempotencyStore(client, { timeout: 0 })).not.toThrow();
    expect(() => recommendedRedisOptions({ commandTimeout: 0.5 })).toThrow(IdempotencyConfigurationError);
    expect(() => recommendedRedisOptions({ maxReconnectDelay: -1 })).toThrow(
      /recommendedRedisOptions: maxReconnectDelay must be a whole number/,
    );
    client.disconnect();
  });

  it('refuses a fractional duration before sending anything, where it used to round it up', async () => {
    const client = new Redis({ lazyConnect: true });
    const sent = [jest.spyOn(client, 'eval'), jest.spyOn(client, 'evalsha')];
    const store = new RedisIdempotencyStore(client, { prefix: prefix() });
    await expect(store.claim('k', { token: 't', leaseTtl: 1.5 })).rejects.toThrow(IdempotencyConfigurationError);
    await expect(store.complete('k', 't', { result: 'r', ttl: 0.5 })).rejects.toThrow(
      /complete: ttl must be a whole number of milliseconds/,
    );
    await expect(store.renew('k', 't', Number.NaN)).rejects.toThrow(/renew: leaseTtl must be a whole number of milliseconds/);
    for (const command of sent) expect(command).not.toHaveBeenCalled();
    client.disconnect();
  });
});
