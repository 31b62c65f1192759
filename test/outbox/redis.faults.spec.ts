import Redis from 'ioredis';
import { makeIdempotent } from '../../lib/index.js';
import { OutboxRelay } from '../../lib/core/outbox-relay.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { waitFor } from '../messages/support.js';
import { startFaultProxy, type FaultProxy } from '../support/fault-proxy.js';
import { SendLog, emitTag, inspector, outboxPrefix } from './redis-support.js';

/**
 * Issue 44 on Redis through a fault proxy: a completion whose reply is cut stages its
 * messages once, whether the client's resend or the engine's retry repeats it; a relay
 * that cannot reach Redis loses nothing and sends every message once Redis is back.
 */
let proxy: FaultProxy;
let client: Redis;
let redis: Redis;
beforeEach(async () => {
  proxy = await startFaultProxy({ host: '127.0.0.1', port: 6379 });
  client = new Redis({ host: '127.0.0.1', port: proxy.port, lazyConnect: true, ...recommendedRedisOptions({ maxReconnectDelay: 100 }) });
  client.on('error', () => undefined);
  await client.connect();
  redis = await inspector();
});
afterEach(async () => {
  client.disconnect();
  redis.disconnect();
  await proxy.stop();
});

describe('the Redis outbox through faults', () => {
  it('a completion whose reply was cut, repeated under its token, stages its messages once', async () => {
    const prefix = outboxPrefix();
    const store = new RedisIdempotencyStore(client, { prefix });
    const staged = { id: 'y'.repeat(43), messages: JSON.stringify([{ id: 'msg_0', client: 'EVENTS', pattern: 'e' }]), count: 1 };
    expect((await store.claim('k', { token: 't1', leaseTtl: 10_000 })).claimed).toBe(true);
    proxy.resetMidReply({ afterBytes: 0 });
    // Redis ran the script; its answer never arrived (or arrived to a resend the client made).
    await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged }).catch(() => undefined);
    expect(proxy.stats.reset).toBe(1);
    await waitFor(
      'the client reconnected',
      () =>
        store.ping().then(
          () => true,
          () => false,
        ),
      5_000,
    );
    expect(await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged })).toBe(true);
    expect(await store.outboxBacklog()).toMatchObject({ pending: 1 });
    expect(await redis.zcard(`${prefix}outbox:due`)).toBe(1);
    expect(await redis.hget(`${prefix}outbox:e:${'y'.repeat(43)}`, 'n')).toBe('0');
  });

  it('a relay that cannot reach Redis loses nothing, and sends each message once Redis is back', async () => {
    const store = new RedisIdempotencyStore(client, { prefix: outboxPrefix() });
    const run = makeIdempotent(async (n: number) => void emitTag(`o-${n}`), { store, key: (n) => String(n), scope: 'outage' });
    for (let n = 0; n < 5; n++) await run(n);
    await proxy.refuse();
    proxy.dropConnections();
    let storeFailures = 0;
    const log = new SendLog();
    const relay = new OutboxRelay(store, log.send, { pollInterval: 20 }, { storeFailed: () => storeFailures++ });
    relay.start();
    try {
      await waitFor('the relay failing to claim', () => storeFailures >= 2, 10_000);
      expect(log.attempts).toEqual([]);
      await proxy.heal();
      await waitFor('five messages', () => log.sent.length === 5, 10_000);
      await waitFor('the backlog empty', async () => (await store.outboxBacklog()).pending === 0, 5_000);
      expect(log.tags().sort()).toEqual(['o-0', 'o-1', 'o-2', 'o-3', 'o-4']);
      expect(log.attempts).toHaveLength(5);
    } finally {
      await relay.stop();
    }
  }, 30_000);
});
