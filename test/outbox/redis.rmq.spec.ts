import type { INestApplication, INestMicroservice } from '@nestjs/common';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import Redis from 'ioredis';
import { createClient } from 'redis';
import request from 'supertest';
import { MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';
import { RedisIdempotencyStore, recommendedNodeRedisOptions, recommendedRedisOptions } from '../../lib/redis/index.js';
import { RabbitProbe, uniqueName, waitFor } from '../messages/support.js';
import { ConsumerLog, startRefundsApi, startRefundsConsumer } from './apps.js';
import { inspector, outboxPrefix } from './redis-support.js';

/**
 * Issue 44 on Redis end to end, with a real RabbitMQ: the refunds API (apps.ts) on a Redis
 * store emits through the outbox, and the consumer's `@Idempotent({ ack: true })` applies
 * each message once; an instance SIGKILLed after its record and message committed and
 * while its relay was sending: another instance sends the message once the claim ran out.
 */
const CLAIM_TTL = 2_000;

let probe: RabbitProbe;
let redis: Redis;
beforeAll(async () => {
  probe = await RabbitProbe.open();
  redis = await inspector();
});
afterAll(async () => {
  await probe?.close();
  redis?.disconnect();
});

describe('the outbox on Redis (node-redis) through RabbitMQ', () => {
  const queue = uniqueName('outbox-redis');
  const prefix = outboxPrefix();
  const log = new ConsumerLog();
  const client = createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() });
  let api: INestApplication;
  let consumer: INestMicroservice;

  beforeAll(async () => {
    await client.connect();
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
    api = await startRefundsApi({ store: new RedisIdempotencyStore(client, { prefix }), queue });
  });
  afterAll(async () => {
    await api?.close();
    await consumer?.close();
    await probe?.deleteQueues(queue);
    client.destroy();
  });

  const refund = (key: string, id: string, body: Record<string, unknown> = {}) =>
    request(api.getHttpServer())
      .post(`/refunds/${id}`)
      .set('Idempotency-Key', key)
      .send({ amount: 10, ...body });

  it('sends what a refund emitted once its record completed, with the id the consumer keys on, in staging order', async () => {
    const res = await refund('k-1', 'r-1', { lines: 3 }).expect(201);
    await waitFor('r-1 and its lines applied', () => ['r-1', 'r-1#1', 'r-1#2'].every((id) => log.effects.count(id) === 1));
    expect(log.order.filter((id) => id.startsWith('r-1'))).toEqual(['r-1', 'r-1#1', 'r-1#2']);
    expect(log.messageIds).toEqual(expect.arrayContaining(res.body.messageIds));
    await waitFor('r-1 marked sent', async () => (await redis.zcard(`${prefix}outbox:sent`)) === 1);
  });

  it('sends nothing for a handler that throws, nor for a replay', async () => {
    await refund('k-2', 'r-2', { fail: true }).expect(402);
    await refund('k-3', 'r-3').expect(201);
    const replay = await refund('k-3', 'r-3').expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    await refund('k-4', 'r-4').expect(201);
    await waitFor('r-3 and r-4 applied', () => log.effects.count('r-3') === 1 && log.effects.count('r-4') === 1);
    await waitFor('the backlog empty', async () => (await redis.zcard(`${prefix}outbox:pending`)) === 0);
    expect(log.deliveries.count('r-2')).toBe(0);
    expect(log.deliveries.count('r-3')).toBe(1);
    expect(await redis.zcard(`${prefix}outbox:sent`)).toBe(3);
  });
});

describe('the Redis outbox across a SIGKILL after the completion (ioredis, RabbitMQ)', () => {
  const queue = uniqueName('outbox-redis-crash');
  const prefix = outboxPrefix();
  const log = new ConsumerLog();
  let consumer: INestMicroservice;
  let child: ChildProcessWithoutNullStreams | undefined;

  beforeAll(async () => {
    consumer = await startRefundsConsumer({ store: new MemoryIdempotencyStore(), queue, log });
  });
  afterAll(async () => {
    child?.kill('SIGKILL');
    await consumer?.close();
    await probe?.deleteQueues(queue);
  });

  it('another instance sends what the killed one committed, once its claim ran out, once', async () => {
    child = spawn(process.execPath, ['-r', require.resolve('../support/ts-require.js'), join(__dirname, 'redis-crash-child.ts')], {
      env: { ...process.env, OUTBOX_PREFIX: prefix, OUTBOX_REFUND: 'c-1', OUTBOX_CLAIM_TTL: String(CLAIM_TTL) },
      stdio: 'pipe',
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const printed = (word: string) => new RegExp(`^${word} msg_\\S+$`, 'm').test(out);
    await waitFor(`the child's relay sending (${err})`, () => printed('COMPLETED') && printed('SENDING'), 30_000);
    const messageId = /^COMPLETED (\S+)$/m.exec(out)![1]!;
    expect(/^SENDING (\S+)$/m.exec(out)![1]).toBe(messageId);
    // Its record and message are in Redis, and its relay claimed the message: kill it there.
    const exited = new Promise((resolve) => child!.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const killedAt = Date.now();
    expect(log.deliveries.count('c-1')).toBe(0);

    const survivorClient = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
    await survivorClient.connect();
    const store = new RedisIdempotencyStore(survivorClient, { prefix });
    const survivor = await startRefundsApi({ store, queue, outbox: { claimTtl: CLAIM_TTL, sendTimeout: CLAIM_TTL / 2 } });
    try {
      await waitFor('c-1 applied', () => log.effects.count('c-1') === 1, 20_000);
      const elapsed = Date.now() - killedAt;
      expect(elapsed).toBeLessThan(10_000);
      expect(log.messageIds).toEqual([messageId]);
      // A replay of the execution answers its message id and stages nothing again.
      let ran = false;
      const replay = makeIdempotent(
        async (_refundId: string) => {
          ran = true;
          return 'again';
        },
        { store, key: (refundId) => refundId, scope: 'crash-refund' },
      );
      expect(await replay('c-1')).toBe(messageId);
      expect(ran).toBe(false);
      await waitFor('c-1 marked sent', async () => (await redis.zcard(`${prefix}outbox:sent`)) === 1);
      expect(await redis.zcard(`${prefix}outbox:pending`)).toBe(0);
      expect(log.deliveries.count('c-1')).toBe(1);
      process.stdout.write(`redis outbox crash: message applied ${elapsed} ms after the SIGKILL (claim ttl ${CLAIM_TTL} ms)\n`);
    } finally {
      await survivor.close();
      survivorClient.disconnect();
    }
  }, 60_000);
});
