import Redis from 'ioredis';
import { makeIdempotent } from '../../lib/index.js';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { OutboxRelay } from '../../lib/core/outbox-relay.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';

/**
 * One instance in a process of its own, for redis.rmq.spec.ts: completes a refund whose
 * handler emitted `refund.completed` (the record and the message committed together in
 * Redis), then its relay claims the message and its send never returns. It prints
 * `COMPLETED <message id>` and `SENDING <message id>`; the test SIGKILLs it there.
 * Environment: OUTBOX_PREFIX, OUTBOX_REFUND, OUTBOX_CLAIM_TTL.
 */
async function main(): Promise<void> {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  await client.connect();
  const store = new RedisIdempotencyStore(client, { prefix: process.env.OUTBOX_PREFIX! });
  const claimTtl = Number(process.env.OUTBOX_CLAIM_TTL);
  const relay = new OutboxRelay(
    store,
    (message) => {
      process.stdout.write(`SENDING ${message.id}\n`);
      return new Promise<void>(() => undefined);
    },
    { claimTtl, sendTimeout: claimTtl / 2, pollInterval: 50 },
  );
  relay.start();
  const refund = makeIdempotent(
    async (refundId: string) => stageOutboxMessage('EVENTS', 'refund.completed', { refundId, amount: 7 }).message.id,
    { store, key: (refundId) => refundId, scope: 'crash-refund' },
  );
  process.stdout.write(`COMPLETED ${await refund(process.env.OUTBOX_REFUND!)}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error)?.stack ?? String(error)}\n`);
  process.exit(1);
});
