import IORedis from 'ioredis';
import { createClient } from 'redis';
import { IdempotencyConfigurationError, makeIdempotent } from '../../lib/index.js';
import type { OutboxMessage, StagedOutbox } from '../../lib/core/outbox-store.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions, recommendedRedisOptions } from '../../lib/redis/index.js';
import { waitFor } from '../messages/support.js';
import { REDIS_CLIENTS, Relays, SendLog, emitTag, inspector, outboxPrefix, tagOf } from './redis-support.js';

/**
 * Issue 44 on Redis: the messages an execution staged are written by the script that
 * completes its record, and the relay claims, settles and purges them on the server's
 * clock. The contract the memory and SQL outboxes meet (relay.spec.ts, postgres.spec.ts),
 * through every client the store takes, on the shared Redis.
 */

let redis: IORedis;
beforeAll(async () => {
  redis = await inspector();
});
afterAll(() => redis.disconnect());

const serverNow = async (): Promise<number> => {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
};

const staged = (count = 1): StagedOutbox => {
  const messages = Array.from({ length: count }, (_, n) => ({ id: `msg_${n}`, client: 'EVENTS', pattern: 'e', data: { tag: String(n) } }));
  return { id: 'x'.repeat(43), messages: JSON.stringify(messages), count };
};

describe.each(REDIS_CLIENTS)('the outbox on Redis (%s)', (_name, open) => {
  const relays = new Relays();
  const opened: Array<{ close(): Promise<void> }> = [];
  const newStore = async (prefix = outboxPrefix()) => {
    const store = await open({ prefix });
    opened.push(store);
    return store.store;
  };
  afterEach(async () => {
    await relays.stopAll();
    await Promise.all(opened.splice(0).map((store) => store.close()));
  });

  it('stages only with its own completion, once, on the server clock', async () => {
    const prefix = outboxPrefix();
    const store = await newStore(prefix);
    await store.claim('k', { token: 't1', leaseTtl: 10_000 });
    expect(await store.complete('k', 'someone-else', { result: '{}', ttl: 10_000, outbox: staged() })).toBe(false);
    expect(await store.outboxBacklog()).toEqual({ pending: 0 });
    expect(await redis.keys(`${prefix}outbox*`)).toEqual([]);

    const before = await serverNow();
    expect(await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged() })).toBe(true);
    // A repeat whose first reply was lost: true again, nothing staged twice.
    expect(await store.complete('k', 't1', { result: '{}', ttl: 10_000, outbox: staged() })).toBe(true);
    const after = await serverNow();
    expect(await store.get('k')).toMatchObject({ status: 'completed', result: '{}' });
    const backlog = await store.outboxBacklog();
    expect(backlog.pending).toBe(1);
    expect(backlog.oldestStagedAt).toBeGreaterThanOrEqual(before);
    expect(backlog.oldestStagedAt).toBeLessThanOrEqual(after);
    expect(await redis.hgetall(`${prefix}outbox:e:${'x'.repeat(43)}`)).toMatchObject({
      m: staged().messages,
      c: '1',
      n: '0',
      a: '0',
      s: String(backlog.oldestStagedAt),
      k: `${prefix}{k}`,
    });
    expect(await redis.zcard(`${prefix}outbox:due`)).toBe(1);
  });

  it('sends only after the record completed, in staging order, each with an id of its execution and position', async () => {
    const store = await newStore();
    const log = new SendLog();
    relays.start(store, log.send);
    let backlogInside: number | undefined;
    const refund = makeIdempotent(
      async (id: string) => {
        const ids = [emitTag(`${id}:1`).id, emitTag(`${id}:2`).id, emitTag(`${id}:3`).id];
        // Staged with the execution, not in Redis yet: nothing can leave before the completion.
        backlogInside = (await store.outboxBacklog()).pending;
        return ids;
      },
      { store, key: (id) => id, scope: 'refund' },
    );
    const ids = await refund('r1');
    expect(backlogInside).toBe(0);
    await waitFor('three messages', () => log.sent.length === 3, 5_000);
    expect(log.tags()).toEqual(['r1:1', 'r1:2', 'r1:3']);
    expect(log.sent.map((message) => message.id)).toEqual(ids);
    for (const id of ids) expect(id).toMatch(/^msg_[A-Za-z0-9_-]{43}$/);
    expect(log.sent[0]).toMatchObject({ client: 'EVENTS', pattern: 'refund.completed' });
    await waitFor('the backlog empty', async () => (await store.outboxBacklog()).pending === 0, 5_000);
  });

  it('sends nothing for a handler that throws, nor for a replay', async () => {
    const prefix = outboxPrefix();
    const store = await newStore(prefix);
    const refund = makeIdempotent(
      async (id: string, fail: boolean) => {
        emitTag(id);
        if (fail) throw new Error('declined');
        return id;
      },
      { store, key: (id) => id, scope: 'refund' },
    );
    await expect(refund('failed', true)).rejects.toThrow('declined');
    expect(await redis.keys(`${prefix}outbox*`)).toEqual([]);
    await refund('once', false);
    await refund('once', false); // a replay: the handler does not run
    expect(await store.outboxBacklog()).toMatchObject({ pending: 1 });
    await refund('sentinel', false);
    const log = new SendLog();
    relays.start(store, log.send);
    await waitFor('both messages', () => log.sent.length === 2, 5_000);
    await waitFor('the backlog empty', async () => (await store.outboxBacklog()).pending === 0, 5_000);
    expect(log.tags().sort()).toEqual(['once', 'sentinel']);
  });

  it('retries a failed send with back-off, with the same id, from where it stopped', async () => {
    const prefix = outboxPrefix();
    const store = await newStore(prefix);
    const log = new SendLog();
    log.failNext.set('b', 3);
    const run = makeIdempotent(
      async () => {
        emitTag('a');
        emitTag('b');
        emitTag('c');
      },
      { store, key: () => 'k', scope: 'ordered' },
    );
    await run();
    // The failures are recorded with the execution while the relay backs off.
    const entryKey = (await redis.keys(`${prefix}outbox:e:*`))[0]!;
    relays.start(store, log.send);
    await waitFor('a failure recorded', async () => (await redis.hget(entryKey, 'err')) === 'broker away', 5_000);
    expect(await redis.hget(entryKey, 'n')).toBe('1');
    await waitFor('a, b and c', () => log.sent.length === 3, 5_000);
    expect(log.tags()).toEqual(['a', 'b', 'c']);
    const tries = log.attempts.filter((message) => tagOf(message) === 'b');
    expect(tries).toHaveLength(4);
    expect(new Set(tries.map((message) => message.id)).size).toBe(1);
    expect(log.attempts.filter((message) => tagOf(message) === 'a')).toHaveLength(1);
    await waitFor('marked sent', async () => (await redis.hget(entryKey, 't')) !== null, 5_000);
    expect(await redis.hmget(entryKey, 'n', 'a', 'err', 'o')).toEqual(['3', '3', null, null]);
  });

  it('two relays on two connections never send one message at once, send each once, each execution in order', async () => {
    const prefix = outboxPrefix();
    const stores = [await newStore(prefix), await newStore(prefix)];
    const run = makeIdempotent(
      async (n: number) => {
        emitTag(`${n}:0`);
        emitTag(`${n}:1`);
      },
      { store: stores[0]!, key: (n) => String(n), scope: 'two-relays' },
    );
    await Promise.all(Array.from({ length: 60 }, (_, n) => run(n)));
    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const sent: string[][] = [[], []];
    stores.forEach((store, index) =>
      relays.start(
        store,
        async (message: OutboxMessage) => {
          if (inFlight.has(message.id)) overlaps.push(message.id);
          inFlight.add(message.id);
          // A send that takes a while, so that the relays' rounds overlap.
          await new Promise((resolve) => setTimeout(resolve, 1));
          inFlight.delete(message.id);
          sent[index]!.push(tagOf(message));
        },
        { batchSize: 5 },
      ),
    );
    await waitFor('120 messages', () => sent[0]!.length + sent[1]!.length === 120, 20_000);
    expect(overlaps).toEqual([]);
    expect(new Set([...sent[0]!, ...sent[1]!]).size).toBe(120);
    expect(sent[0]!.length).toBeGreaterThan(0);
    expect(sent[1]!.length).toBeGreaterThan(0);
    for (const tags of sent) {
      for (let n = 0; n < 60; n++) {
        const second = tags.indexOf(`${n}:1`);
        if (second >= 0) expect(tags.indexOf(`${n}:0`)).toBeGreaterThanOrEqual(0);
        if (second >= 0) expect(tags.indexOf(`${n}:0`)).toBeLessThan(second);
      }
    }
    await waitFor('the backlog empty', async () => (await stores[0]!.outboxBacklog()).pending === 0, 5_000);
    expect(await redis.zcard(`${prefix}outbox:sent`)).toBe(60);
  }, 30_000);

  it('takes over what a relay that died claimed, once its claim ran out; the dead one settles nothing', async () => {
    const store = await newStore();
    const run = makeIdempotent(async () => void emitTag('orphan'), { store, key: () => 'k', scope: 'orphan' });
    await run();
    // A relay claims and dies before sending (its process is gone: nothing settles the claim).
    const [claimed] = await store.claimOutbox({ owner: 'dead', limit: 10, claimTtl: 300 });
    expect(claimed).toMatchObject({ next: 0, attempts: 0 });
    expect(await store.claimOutbox({ owner: 'other', limit: 10, claimTtl: 300 })).toEqual([]);
    const diedAt = Date.now();
    const log = new SendLog();
    relays.start(store, log.send);
    await waitFor('the orphan', () => log.sent.length === 1, 5_000);
    expect(Date.now() - diedAt).toBeGreaterThanOrEqual(250);
    await waitFor('the backlog empty', async () => (await store.outboxBacklog()).pending === 0, 5_000);
    expect(await store.settleOutbox(claimed!.id, 'dead', { next: 1 })).toBe(false);
  });

  it('keeps sent executions for the retention, then a relay purges them', async () => {
    const prefix = outboxPrefix();
    const store = await newStore(prefix);
    const run = makeIdempotent(async (n: number) => void emitTag(String(n)), { store, key: (n) => String(n), scope: 'purge' });
    for (let n = 0; n < 3; n++) await run(n);
    const [claimed] = await store.claimOutbox({ owner: 'me', limit: 1, claimTtl: 10_000 });
    expect(await store.settleOutbox(claimed!.id, 'me', { next: 1 })).toBe(true);
    expect(await store.purgeOutbox(60_000, 10)).toBe(0);
    expect(await store.outboxBacklog()).toMatchObject({ pending: 2 });
    const log = new SendLog();
    relays.start(store, log.send, { retention: 1 });
    await waitFor('the sent executions purged', async () => (await redis.keys(`${prefix}outbox*`)).length === 0, 5_000);
    expect(log.sent).toHaveLength(2);
  });
});

describe('the Redis outbox options', () => {
  it.each([
    [
      'node-redis',
      async (keyPrefix: string) => {
        const client = createClient({ url: 'redis://127.0.0.1:6379', keyPrefix, ...recommendedNodeRedisOptions() });
        await client.connect();
        return { client, close: () => client.destroy() };
      },
    ],
    [
      'ioredis',
      async (keyPrefix: string) => {
        const client = new IORedis({ host: '127.0.0.1', port: 6379, keyPrefix, lazyConnect: true, ...recommendedRedisOptions() });
        await client.connect();
        return { client, close: () => client.disconnect() };
      },
    ],
  ] as const)('applies the client keyPrefix to every outbox key (%s)', async (_name, connect) => {
    const keyPrefix = outboxPrefix();
    const { client, close } = await connect(keyPrefix);
    try {
      const store = new RedisIdempotencyStore(client, { prefix: 'idem:' });
      await makeIdempotent(async () => void emitTag('p'), { store, key: () => 'k', scope: 'kp' })();
      const keys = await redis.keys(`${keyPrefix}*`);
      expect(keys).toHaveLength(4);
      expect(keys).toEqual(
        expect.arrayContaining([
          `${keyPrefix}idem:outbox:due`,
          `${keyPrefix}idem:outbox:pending`,
          expect.stringMatching(/idem:outbox:e:[\w-]{43}$/),
          expect.stringMatching(/idem:\{[\w-]+\}$/),
        ]),
      );
      const [claimed] = await store.claimOutbox({ owner: 'me', limit: 1, claimTtl: 10_000 });
      expect(await store.settleOutbox(claimed!.id, 'me', { next: 1 })).toBe(true);
      expect(await redis.zcard(`${keyPrefix}idem:outbox:sent`)).toBe(1);
      expect(await redis.keys('idem:outbox*')).toEqual([]);
      await redis.del(...(await redis.keys(`${keyPrefix}*`)));
    } finally {
      close();
    }
  });

  it('outbox: false turns it off, and emit() says why; a value that is not a boolean is refused', async () => {
    const client = createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() });
    await client.connect();
    try {
      const store = new RedisIdempotencyStore(client, { prefix: outboxPrefix(), outbox: false });
      expect(store.outboxAvailable).toBe(false);
      const run = makeIdempotent(async () => emitTag('off'), { store, key: () => 'k', scope: 'off' });
      await expect(run()).rejects.toThrow(IdempotencyConfigurationError);
      await expect(run()).rejects.toThrow(/RedisIdempotencyStore: its outbox option is false\)\. Remove outbox: false/);
      await expect(store.outboxBacklog()).rejects.toThrow(/RedisIdempotencyStore has no outbox: its outbox option is false/);
      expect(() => new RedisIdempotencyStore(client, { outbox: 'yes' as never })).toThrow(/outbox must be true or false, got yes/);
    } finally {
      client.destroy();
    }
  });
});
