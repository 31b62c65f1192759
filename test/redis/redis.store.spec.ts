import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
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
