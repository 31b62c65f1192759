import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions } from '../../lib/redis/index.js';
import { describeStoreContract } from '../../lib/testing/store-contract.js';

// The shared Redis on 6379, with a unique prefix per run so parallel runs never meet.
const prefix = () => `test:idem:${randomUUID()}:`;
const url = 'redis://127.0.0.1:6379';

describeStoreContract('RedisIdempotencyStore (node-redis 6, standalone, RESP3)', async () => {
  const client = createClient({ url, ...recommendedNodeRedisOptions() });
  await client.connect();
  return { store: new RedisIdempotencyStore(client, { prefix: prefix() }), dispose: () => client.destroy() };
});

describeStoreContract('RedisIdempotencyStore (node-redis 6, standalone, RESP2)', async () => {
  const client = createClient({ url, RESP: 2, ...recommendedNodeRedisOptions() });
  await client.connect();
  return { store: new RedisIdempotencyStore(client, { prefix: prefix() }), dispose: () => client.destroy() };
});

describe('RedisIdempotencyStore on node-redis', () => {
  it('applies the client keyPrefix to script keys, as with ioredis', async () => {
    const keyPrefix = `test:kp:${randomUUID()}:`;
    const client = createClient({ url, keyPrefix, ...recommendedNodeRedisOptions() });
    const plain = createClient({ url });
    await Promise.all([client.connect(), plain.connect()]);
    try {
      const store = new RedisIdempotencyStore(client, { prefix: 'idem:' });
      expect((await store.claim('k1', { token: 't', leaseTtl: 10_000 })).claimed).toBe(true);
      expect(await plain.exists(`${keyPrefix}idem:{k1}`)).toBe(1);
      expect(await plain.exists('idem:{k1}')).toBe(0);
    } finally {
      client.destroy();
      plain.destroy();
    }
  });

  it('reads every reply shape under a typeMapping to Buffers', async () => {
    const client = createClient({ url, ...recommendedNodeRedisOptions() });
    await client.connect();
    try {
      const store = new RedisIdempotencyStore(client.withTypeMapping({ 36: Buffer, 43: Buffer }), { prefix: prefix() });
      const claim = await store.claim('k', { token: 't', leaseTtl: 10_000, fingerprint: 'fp' });
      expect(claim.claimed).toBe(true);
      expect(await store.complete('k', 't', { result: 'r', ttl: 10_000 })).toBe(true);
      const replay = await store.claim('k', { token: 't2', leaseTtl: 10_000, fingerprint: 'fp' });
      expect(replay).toMatchObject({ claimed: false, record: { status: 'completed', result: 'r', fingerprint: 'fp', leaseToken: 't' } });
    } finally {
      client.destroy();
    }
  });

  it('refuses a fractional duration before sending anything', async () => {
    const client = createClient({ url, ...recommendedNodeRedisOptions() });
    const store = new RedisIdempotencyStore(client, { prefix: prefix() });
    // Not connected: any command sent would reject with ClientClosedError, not a configuration error.
    await expect(store.claim('k', { token: 't', leaseTtl: 1.5 })).rejects.toThrow(IdempotencyConfigurationError);
    expect(() => recommendedNodeRedisOptions({ connectTimeout: 0.5 })).toThrow(
      /recommendedNodeRedisOptions: connectTimeout must be a whole number/,
    );
  });
});
