import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import Redis5 from 'ioredis5';
import { createClient } from 'redis';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { OutboxRelay, type OutboxRelayOptions } from '../../lib/core/outbox-relay.js';
import type { OutboxMessage } from '../../lib/core/outbox-store.js';
import {
  RedisIdempotencyStore,
  recommendedNodeRedisOptions,
  recommendedRedisOptions,
  type RedisIdempotencyStoreOptions,
} from '../../lib/redis/index.js';

/**
 * What the Redis outbox specs share: a store on the shared Redis (127.0.0.1:6379) through
 * each supported client, under a prefix of its own; a recorder of what a relay sends.
 */

/** A prefix no other run or Jest worker uses. */
export const outboxPrefix = (): string => `test:outbox:${randomUUID()}:`;

export interface OpenedRedisStore {
  store: RedisIdempotencyStore;
  close(): Promise<void>;
}

type Opener = (options: RedisIdempotencyStoreOptions) => Promise<OpenedRedisStore>;

/** Every client the store takes, on a connection of its own per call (two relays are two connections). */
export const REDIS_CLIENTS: ReadonlyArray<readonly [name: string, open: Opener]> = [
  [
    'ioredis 6',
    async (options) => {
      const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
      await client.connect();
      return { store: new RedisIdempotencyStore(client, options), close: async () => void client.disconnect() };
    },
  ],
  [
    'ioredis 5',
    async (options) => {
      const client = new Redis5({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
      await client.connect();
      return { store: new RedisIdempotencyStore(client, options), close: async () => void client.disconnect() };
    },
  ],
  [
    'node-redis 6 (RESP3)',
    async (options) => {
      const client = createClient({ url: 'redis://127.0.0.1:6379', ...recommendedNodeRedisOptions() });
      await client.connect();
      return { store: new RedisIdempotencyStore(client, options), close: async () => client.destroy() };
    },
  ],
  [
    'node-redis 6 (RESP2)',
    async (options) => {
      const client = createClient({ url: 'redis://127.0.0.1:6379', RESP: 2, ...recommendedNodeRedisOptions() });
      await client.connect();
      return { store: new RedisIdempotencyStore(client, options), close: async () => client.destroy() };
    },
  ],
];

/** Stages `{ tag }` for client EVENTS in the current execution. */
export function emitTag(tag: string): OutboxMessage {
  return stageOutboxMessage('EVENTS', 'refund.completed', { tag }).message;
}

/** What a relay sent (confirmed) and tried; `failNext` makes the next sends of a tag fail. */
export class SendLog {
  readonly sent: OutboxMessage[] = [];
  readonly attempts: OutboxMessage[] = [];
  readonly failNext = new Map<string, number>();
  readonly send = async (message: OutboxMessage): Promise<void> => {
    this.attempts.push(message);
    const tag = tagOf(message);
    const failures = this.failNext.get(tag) ?? 0;
    if (failures > 0) {
      this.failNext.set(tag, failures - 1);
      throw new Error('broker away');
    }
    this.sent.push(message);
  };
  tags(): string[] {
    return this.sent.map(tagOf);
  }
}

export function tagOf(message: OutboxMessage): string {
  return (message.data as { tag: string }).tag;
}

/** Relays started by a spec, stopped after each test. */
export class Relays {
  private readonly started: OutboxRelay[] = [];
  start(store: RedisIdempotencyStore, send: (message: OutboxMessage) => Promise<void>, options: OutboxRelayOptions = {}): OutboxRelay {
    const relay = new OutboxRelay(store, send, { pollInterval: 20, retryDelay: 10, maxRetryDelay: 40, ...options });
    this.started.push(relay);
    relay.start();
    return relay;
  }
  async stopAll(): Promise<void> {
    await Promise.all(this.started.splice(0).map((relay) => relay.stop()));
  }
}

/** A plain client beside the store, to read the outbox's keys as they are in Redis. */
export async function inspector(): Promise<Redis> {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
  await client.connect();
  return client;
}
